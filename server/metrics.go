package server

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus metrics (Config.Metrics). Counters
// are updated as things happen; sessions, processes and budgets are read
// when scraped (serverCollector), so they cost nothing between scrapes.
// Every method is a no-op on a nil *metrics.
type metrics struct {
	reg *prometheus.Registry

	connections      prometheus.Gauge
	connectionsTotal prometheus.Counter
	requests         *prometheus.HistogramVec // method, code, sandboxed
	starts           *prometheus.CounterVec   // result
	exits            prometheus.Counter
	outputBytes      *prometheus.CounterVec // stream
	droppedPushes    prometheus.Counter
	stalls           prometheus.Counter
	stallSeconds     prometheus.Counter
	fsWrittenBytes   prometheus.Counter
	fsReadBytes      prometheus.Counter
	sandboxHelper    *prometheus.HistogramVec // warm
	refusals         *prometheus.CounterVec   // code

	// Children of the vectors by label values, so that the per-request
	// and per-chunk paths skip hashing label strings (requestKey →
	// prometheus.Observer, stream → prometheus.Counter).
	requestObs sync.Map
	streamCtr  sync.Map
}

type requestKey struct {
	method    string
	code      int
	sandboxed bool
}

// requestBuckets span a local process/write (tens of µs) to a long poll
// (process/read waits up to MaxWaitMs).
var requestBuckets = []float64{.0001, .0005, .001, .005, .01, .05, .1, .5, 1, 5, 30, 300}

func newMetrics(s *Server, reg *prometheus.Registry) (*metrics, error) {
	const ns = "exec_server"
	m := &metrics{
		reg: reg,
		connections: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "connections",
			Help: "Connections being served (websocket and stdio)."}),
		connectionsTotal: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "connections_total",
			Help: "Connections served since start."}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "request_duration_seconds",
			Help:    "JSON-RPC requests by method, reply code (0: success) and whether a sandbox was asked for; _count is the request count. Requests refused before their method runs (unknown method, before initialize) are not counted.",
			Buckets: requestBuckets}, []string{"method", "code", "sandboxed"}),
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "process_starts_total",
			Help: "process/start requests by result: ok, or the error code."}, []string{"result"}),
		exits: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "process_exits_total",
			Help: "Processes that exited."}),
		outputBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "output_bytes_total",
			Help: "Process output bytes read, by stream (stdout, stderr, pty)."}, []string{"stream"}),
		droppedPushes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "pushes_dropped_total",
			Help: "Process events not pushed because their session had no connection (they stay readable with process/read)."}),
		stalls: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "push_stalls_total",
			Help: "Process events whose push waited for room in a connection's send queue (back-pressure: the process's output was not read meanwhile)."}),
		stallSeconds: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "push_stall_seconds_total",
			Help: "Time process events waited for room in a send queue."}),
		fsWrittenBytes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "fs_written_bytes_total",
			Help: "Bytes written by successful fs/writeFile and fs/writeBlock requests."}),
		fsReadBytes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "fs_read_bytes_total",
			Help: "Bytes of file data returned by successful fs/readFile and fs/readBlock requests."}),
		sandboxHelper: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "sandbox_helper_seconds",
			Help:    "Sandboxed fs operations run in a sandbox helper, by whether a warm helper served them (false: a helper was started, its namespaces and view built); the time includes the start.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .5, 1, 5}}, []string{"warm"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "http_refusals_total",
			Help: "HTTP requests refused by code: 401 (authentication), 403 (an Origin header, or a peer inside one of the server's sandboxes)."}, []string{"code"}),
	}
	all := []prometheus.Collector{m.connections, m.connectionsTotal, m.requests, m.starts, m.exits,
		m.outputBytes, m.droppedPushes, m.stalls, m.stallSeconds, m.fsWrittenBytes, m.fsReadBytes, m.sandboxHelper,
		m.refusals, &serverCollector{s}}
	for i, c := range all {
		if err := reg.Register(c); err != nil {
			// Typically a registry given to two servers: leave it as
			// it was.
			for _, done := range all[:i] {
				reg.Unregister(done)
			}
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) request(method string, code int, d time.Duration, sandboxed bool) {
	if m == nil {
		return
	}
	k := requestKey{method, code, sandboxed}
	o, ok := m.requestObs.Load(k)
	if !ok {
		o, _ = m.requestObs.LoadOrStore(k, m.requests.WithLabelValues(method, strconv.Itoa(code), strconv.FormatBool(sandboxed)))
	}
	o.(prometheus.Observer).Observe(d.Seconds())
}

func (m *metrics) start(code int) {
	if m == nil {
		return
	}
	result := "ok"
	if code != 0 {
		result = strconv.Itoa(code)
	}
	m.starts.WithLabelValues(result).Inc()
}

func (m *metrics) exit() {
	if m != nil {
		m.exits.Inc()
	}
}

func (m *metrics) output(stream string, n int) {
	if m != nil {
		c, ok := m.streamCtr.Load(stream)
		if !ok {
			c, _ = m.streamCtr.LoadOrStore(stream, m.outputBytes.WithLabelValues(stream))
		}
		c.(prometheus.Counter).Add(float64(n))
	}
}

func (m *metrics) droppedPush() {
	if m != nil {
		m.droppedPushes.Inc()
	}
}

func (m *metrics) stall(d time.Duration) {
	if m != nil {
		m.stalls.Inc()
		m.stallSeconds.Add(d.Seconds())
	}
}

func (m *metrics) fsWritten(n int) {
	if m != nil {
		m.fsWrittenBytes.Add(float64(n))
	}
}

func (m *metrics) fsRead(n int) {
	if m != nil {
		m.fsReadBytes.Add(float64(n))
	}
}

// helperCall observes one sandbox helper call (sandbox.HelperObserver).
func (m *metrics) helperCall(d time.Duration, warm bool) {
	m.sandboxHelper.WithLabelValues(strconv.FormatBool(warm)).Observe(d.Seconds())
}

func (m *metrics) connOpened() {
	if m != nil {
		m.connections.Inc()
		m.connectionsTotal.Inc()
	}
}

func (m *metrics) connClosed() {
	if m != nil {
		m.connections.Dec()
	}
}

func (m *metrics) refusal(code string) {
	if m != nil {
		m.refusals.WithLabelValues(code).Inc()
	}
}

// serverCollector reads sessions, processes and budgets when scraped.
type serverCollector struct{ s *Server }

var (
	descSessions = prometheus.NewDesc("exec_server_sessions", "Sessions by state: attached to a connection, or detached (kept for resume until SessionTTL).",
		[]string{"state"}, nil)
	descProcesses = prometheus.NewDesc("exec_server_processes", "Processes by state (as process/list reports them), all sessions.",
		[]string{"state"}, nil)
	descBudgetUsed = prometheus.NewDesc("exec_server_budget_used_bytes", "Bytes in use of each server-wide budget.",
		[]string{"budget"}, nil)
	descBudgetLimit = prometheus.NewDesc("exec_server_budget_limit_bytes", "Size of each server-wide budget.",
		[]string{"budget"}, nil)
)

func (c *serverCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descSessions
	ch <- descProcesses
	ch <- descBudgetUsed
	ch <- descBudgetLimit
}

func (c *serverCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	s.mu.Lock()
	all := make([]*session, 0, len(s.sessions))
	for _, ss := range s.sessions {
		all = append(all, ss)
	}
	s.mu.Unlock()
	var attached, detached int
	states := map[string]int{}
	for _, ss := range all {
		ss.mu.Lock()
		on := ss.conn != nil
		ss.mu.Unlock()
		if on {
			attached++
		} else {
			detached++
		}
		for _, p := range ss.procs.List().Processes {
			states[p.State]++
		}
	}
	ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(attached), "attached")
	ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(detached), "detached")
	for st, n := range states {
		ch <- prometheus.MustNewConstMetric(descProcesses, prometheus.GaugeValue, float64(n), st)
	}
	for _, b := range []struct {
		name       string
		used, size int64
	}{
		{"incoming", s.incoming.Used(), s.incoming.Limit()},
		{"retained", s.retained.Used(), s.retained.Limit()},
		{"stdin", s.stdin.Used(), s.stdin.Limit()},
	} {
		ch <- prometheus.MustNewConstMetric(descBudgetUsed, prometheus.GaugeValue, float64(b.used), b.name)
		ch <- prometheus.MustNewConstMetric(descBudgetLimit, prometheus.GaugeValue, float64(b.size), b.name)
	}
}

// MetricsHandler serves Config.Metrics in the Prometheus text format, behind
// Config.Authenticate, refusing an Origin header as the websocket listener
// does; nil when Config.Metrics is not set. Use it to serve /metrics on a
// separate listener (exec-server --metrics-listen).
func (s *Server) MetricsHandler() http.Handler {
	if s.metricsHTTP == nil {
		return nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.refuseSandboxPeer(w, r) {
			return
		}
		if _, ok := r.Header["Origin"]; ok {
			s.refused(r, http.StatusForbidden, errors.New("request has an Origin header (a browser page)"))
			w.WriteHeader(http.StatusForbidden)
			return
		}
		if r.URL.Path != "/metrics" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		s.serveMetrics(w, r, s.authenticate())
	})
}

// serveMetrics answers /metrics; false when metrics are off (the caller
// answers as for any unknown path).
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request, authenticate func(*http.Request) error) bool {
	if s.metricsHTTP == nil {
		return false
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET,HEAD")
		w.WriteHeader(http.StatusMethodNotAllowed)
		return true
	}
	if authenticate != nil {
		if err := authenticate(r); err != nil {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(err.Error()))
			return true
		}
	}
	s.metricsHTTP.ServeHTTP(w, r)
	return true
}

func newMetricsHTTP(reg *prometheus.Registry, log *slog.Logger) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	})
}
