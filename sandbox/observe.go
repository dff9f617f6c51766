package sandbox

import (
	"context"
	"time"
)

// HelperObserver is told of each operation Run served in a helper: how
// long it took, start-up included, and whether a warm helper served it.
type HelperObserver func(d time.Duration, warm bool)

type observerKey struct{}

// WithHelperObserver returns ctx carrying f: the Run calls made with it
// report to f (the server's metrics).
func WithHelperObserver(ctx context.Context, f HelperObserver) context.Context {
	return context.WithValue(ctx, observerKey{}, f)
}

// observeHelper reports one helper call to ctx's observer, if any.
func observeHelper(ctx context.Context, start time.Time, warm bool) {
	if f, _ := ctx.Value(observerKey{}).(HelperObserver); f != nil {
		f(time.Since(start), warm)
	}
}
