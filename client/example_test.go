package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"strings"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/protocol"
)

// serverBinary returns this project's server, built for the examples.
func serverBinary() string {
	bin, err := ours()
	if err != nil {
		log.Fatal(err)
	}
	return bin
}

// Run a command and collect its output and exit code, as with os/exec.
func ExampleDialStdio() {
	ctx := context.Background()
	c, err := client.DialStdio(ctx, exec.Command(serverBinary(), "--listen", "stdio"), client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	var stdout, stderr strings.Builder
	p, err := c.Start(ctx, client.Cmd{
		Argv:   []string{"sh", "-c", "echo hello; echo oops >&2; exit 3"},
		Env:    map[string]string{"PATH": "/usr/bin:/bin"},
		Stdout: &stdout,
		Stderr: &stderr,
	})
	if err != nil {
		log.Fatal(err)
	}
	code, err := p.Wait(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stdout %q, stderr %q, exit code %d\n", stdout.String(), stderr.String(), code)
	// Output: stdout "hello\n", stderr "oops\n", exit code 3
}

// Stream a process's output as it is produced, and feed its stdin.
func ExampleProcess_Stdout() {
	ctx := context.Background()
	c, err := client.DialStdio(ctx, exec.Command(serverBinary(), "--listen", "stdio"), client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	p, err := c.Start(ctx, client.Cmd{Argv: []string{"tr", "a-z", "A-Z"}, StdinPipe: true})
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		io.WriteString(p.Stdin(), "shout\n")
		p.Stdin().Close() // end of input: tr exits
	}()
	io.Copy(os.Stdout, p.Stdout())
	code, _ := p.Wait(ctx)
	fmt.Println("exit code", code)
	// Output:
	// SHOUT
	// exit code 0
}

// A terminal session: one output stream, input is keystrokes.
func ExampleCmd_tty() {
	ctx := context.Background()
	c, err := client.DialStdio(ctx, exec.Command(serverBinary(), "--listen", "stdio"), client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	p, err := c.Start(ctx, client.Cmd{Argv: []string{"sh", "-c", "read name; echo hi $name"}, TTY: true})
	if err != nil {
		log.Fatal(err)
	}
	p.Write(ctx, []byte("gopher\n"))
	out, _ := io.ReadAll(p.Output())
	// The terminal echoes the input and ends lines with \r\n.
	fmt.Printf("%q\n", out)
	// Output: "gopher\r\nhi gopher\r\n"
}

// Errors from the server carry their wire code.
func ExampleError() {
	ctx := context.Background()
	c, err := client.DialStdio(ctx, exec.Command(serverBinary(), "--listen", "stdio"), client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	_, err = c.Start(ctx, client.Cmd{Argv: []string{"/no/such/program"}})
	var e *client.Error
	if errors.As(err, &e) {
		fmt.Println(e.Code == protocol.CodeInternal, e.Message)
	}
	// Output: true No such file or directory (os error 2)
}

// Copy a file to the server and back in blocks.
func ExampleClient_Upload() {
	ctx := context.Background()
	c, err := client.DialStdio(ctx, exec.Command(serverBinary(), "--listen", "stdio"), client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	n, err := c.Upload(ctx, dir+"/greeting.txt", strings.NewReader("hello, server\n"), nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("uploaded", n, "bytes")
	if _, err := c.Download(ctx, dir+"/greeting.txt", os.Stdout, nil); err != nil {
		log.Fatal(err)
	}
	fi, _ := c.Stat(ctx, dir+"/greeting.txt")
	fmt.Println("size", fi.Size())
	// Output:
	// uploaded 14 bytes
	// hello, server
	// size 14
}

// The os/exec Output idiom.
func ExampleClient_Output() {
	ctx := context.Background()
	c, err := client.DialStdio(ctx, exec.Command(serverBinary(), "--listen", "stdio"), client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	out, code, err := c.Output(ctx, client.Cmd{Argv: []string{"uname", "-s"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s exit %d\n", strings.TrimSpace(string(out)), code)
	// Output: Linux exit 0
}
