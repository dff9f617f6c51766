package relay

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/execgo/exec-server/remote/harness"
)

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startNATSCluster starts three in-process NATS servers routed together,
// JetStream on.
func startNATSCluster(t *testing.T) ([]*natsserver.Server, string) {
	t.Helper()
	ports := []int{freePort(t), freePort(t), freePort(t)}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	var servers []*natsserver.Server
	var urls []string
	for i, p := range ports {
		ns, err := natsserver.NewServer(&natsserver.Options{
			ServerName: fmt.Sprint("s", i), Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
			Cluster: natsserver.ClusterOpts{Name: "relay", Host: "127.0.0.1", Port: p},
			Routes:  natsserver.RoutesFromStr(strings.Join(routes, ",")),
			NoLog:   true, NoSigs: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		go ns.Start()
		t.Cleanup(ns.Shutdown)
		servers = append(servers, ns)
	}
	for _, ns := range servers {
		if !ns.ReadyForConnections(10 * time.Second) {
			t.Fatal("nats server not ready")
		}
		urls = append(urls, ns.ClientURL())
	}
	return servers, strings.Join(urls, ",")
}

// Losing the NATS server that leads the KV buckets, in a 3-server
// cluster with R3 buckets: an existing cross-node stream goes on, and new
// streams are admitted again once JetStream has elected another leader
// (4-9 s in NATS 2.11+). Takes 15-25 s: run with EXEC_RELAY_NATS_CLUSTER=1.
func TestFleetNATSServerLoss(t *testing.T) {
	if os.Getenv("EXEC_RELAY_NATS_CLUSTER") == "" {
		t.Skip("EXEC_RELAY_NATS_CLUSTER=1 runs the 3-server NATS cluster test (15-25 s)")
	}
	servers, urls := startNATSCluster(t)
	node := func(name string) *fleetNode { return startNodeWith(t, urls, name, KVStoreOptions{Replicas: 3}) }
	a, b := node("a"), node("b")
	startExecutor(t, a.base, "E")
	a.executorOn(t, "E", 30*time.Second)
	d, err := harness.NewDialer(b.base, "E", harnessToken, harness.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ch, err := d.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := exchange(ctx, ch, 0, 50); err != nil {
		t.Fatal(err)
	}
	var leader *natsserver.Server
	for _, ns := range servers {
		if ns.JetStreamIsStreamLeader("$G", "KV_relay_auth") {
			leader = ns
		}
	}
	if leader == nil {
		t.Fatal("no leader for the authorization bucket")
	}
	killed := time.Now()
	leader.Shutdown()
	if err := exchange(ctx, ch, 50, 200); err != nil {
		t.Fatalf("existing stream after the KV leader went: %v", err)
	}
	t.Logf("existing stream: 200 messages in %s after the kill", time.Since(killed).Round(time.Millisecond))
	for {
		dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
		ch2, err := d.Dial(dctx)
		dcancel()
		if err == nil {
			ch2.Close()
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no new stream admitted after the KV leader went: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("new streams admitted again %s after the KV leader went", time.Since(killed).Round(time.Millisecond))
}
