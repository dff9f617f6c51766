package relay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// KVStore is a Store in NATS JetStream key-value buckets, shared by every
// node of a fleet: registrations in one bucket (keyed by the environment
// id in base64url: KV keys allow fewer characters than environment ids),
// single-use authorizations in another, keyed by the token's hash (a dump
// of the bucket hands out no usable token). TakeAuthorization is a read
// followed by a delete conditioned on the revision read: of two nodes
// racing to take one authorization, exactly one wins.
type KVStore struct {
	regs, auth jetstream.KeyValue
	maxValue   int
	wait       time.Duration // KVStoreOptions.Wait
	mirror     *regMirror    // kvmirror.go
}

// KVStoreOptions configure the buckets.
type KVStoreOptions struct {
	// Prefix of the bucket names (default "relay"): <prefix>_reg, <prefix>_auth.
	Prefix string
	// Replicas of each bucket (default 1; use 3 on a 3-server cluster).
	Replicas int
	// RegistrationTTL: a registration not put or touched for this long
	// expires (default DefaultRegistrationTTL).
	RegistrationTTL time.Duration
	// AuthorizationTTL bounds how long an authorization is kept (default
	// 60 s; Expires is checked as well).
	AuthorizationTTL time.Duration
	// Memory keeps the buckets in memory rather than on disk.
	Memory bool
	// MaxRegistrations bounds the registrations held (default 1024, as
	// Options.MaxEnvironments); a registration for one more environment
	// is refused with ErrStoreFull (registry_full) until one expires.
	MaxRegistrations int
	// MaxAuthorizations bounds the authorizations minted within
	// AuthorizationTTL+5s, pending or taken (a taken one leaves a delete
	// marker until then): default 4096. One more is refused with
	// ErrStoreFull (too_many_pending_authorizations).
	MaxAuthorizations int
	// MaxValueSize bounds one record (default 4 KiB; ours are about 1.8
	// KiB, most of it the ML-KEM public key); a larger one is refused
	// with ErrValueTooLarge.
	MaxValueSize int
	// Wait bounds how long an operation whose context has no deadline
	// waits for the store, through a leader election (default 8 s: under
	// the reference clients' 10 s timeouts on /connect and /validate,
	// ../shared/spec/remote.md section 12, so that they get the answer).
	Wait time.Duration
}

// ErrValueTooLarge is returned for a record over KVStoreOptions.MaxValueSize.
var ErrValueTooLarge = errors.New("relay: store record too large")

// NewKVStore creates (or binds to) the buckets.
func NewKVStore(ctx context.Context, nc *nats.Conn, o KVStoreOptions) (*KVStore, error) {
	if o.Prefix == "" {
		o.Prefix = "relay"
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.RegistrationTTL <= 0 {
		o.RegistrationTTL = DefaultRegistrationTTL
	}
	if o.AuthorizationTTL <= 0 {
		o.AuthorizationTTL = time.Minute
	}
	if o.MaxRegistrations <= 0 {
		o.MaxRegistrations = 1024
	}
	if o.MaxAuthorizations <= 0 {
		o.MaxAuthorizations = 4096
	}
	if o.MaxValueSize <= 0 {
		o.MaxValueSize = 4 << 10
	}
	if o.Wait <= 0 {
		o.Wait = 8 * time.Second
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	storage := jetstream.FileStorage
	if o.Memory {
		storage = jetstream.MemoryStorage
	}
	regs, err := bucket(ctx, js, jetstream.KeyValueConfig{
		Bucket: o.Prefix + "_reg", History: 1, TTL: o.RegistrationTTL, Storage: storage, Replicas: o.Replicas,
		MaxValueSize: int32(o.MaxValueSize),
	}, o.MaxRegistrations)
	if err != nil {
		return nil, fmt.Errorf("relay: registration bucket: %w", err)
	}
	auth, err := bucket(ctx, js, jetstream.KeyValueConfig{
		// Authorizations are short-lived: memory is enough.
		Bucket: o.Prefix + "_auth", History: 1, TTL: o.AuthorizationTTL + 5*time.Second, Storage: jetstream.MemoryStorage, Replicas: o.Replicas,
		MaxValueSize: int32(o.MaxValueSize),
	}, o.MaxAuthorizations)
	if err != nil {
		return nil, fmt.Errorf("relay: authorization bucket: %w", err)
	}
	return &KVStore{regs: regs, auth: auth, maxValue: o.MaxValueSize, wait: o.Wait,
		mirror: watchRegistrations(regs, o.RegistrationTTL, o.MaxRegistrations)}, nil
}

// bucket binds to the bucket, or creates it, and bounds its records to
// maxRecords (the bucket's stream keeps at most that many messages and
// refuses new ones: with one message per key, a put of a new key past the
// bound fails and an existing key's update still replaces its message).
// Nodes starting together race to create it, and on a fresh cluster a
// create can stall until JetStream has a leader: each attempt is bounded
// and retried until ctx ends.
func bucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, maxRecords int) (jetstream.KeyValue, error) {
	var last error
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		kv, err := js.KeyValue(actx, cfg.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = js.CreateKeyValue(actx, cfg)
		}
		if err == nil {
			err = boundRecords(actx, js, cfg, maxRecords)
		}
		if err == nil {
			// Bound again: the handle reads directly or not as the
			// stream allowed when it was bound.
			kv, err = js.KeyValue(actx, cfg.Bucket)
		}
		if err == nil {
			cancel()
			return kv, nil
		}
		cancel()
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// boundRecords sets the bucket stream's record and value bounds (every
// node does, with its own options: the last one to start wins).
func boundRecords(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, maxRecords int) error {
	st, err := js.Stream(ctx, "KV_"+cfg.Bucket)
	if err != nil {
		return err
	}
	sc := st.CachedInfo().Config
	// Reads of a replicated bucket go to its leader: a KV bucket allows
	// "direct" gets, which any replica answers, and a replica that has
	// not applied a put yet answers "not found" (an executor dialling
	// right after registering was refused 403
	// unexpected_executor_registration_id with R3 buckets; a harness's
	// authorization could be missed the same way).
	// The stream's own replica count, not this node's option: a node
	// started with the default against an R3 bucket must not turn direct
	// gets back on.
	direct := sc.Replicas <= 1
	if sc.MaxMsgs == int64(maxRecords) && sc.Discard == jetstream.DiscardNew && sc.MaxMsgSize == cfg.MaxValueSize && sc.AllowDirect == direct {
		return nil
	}
	sc.MaxMsgs, sc.Discard, sc.MaxMsgSize = int64(maxRecords), jetstream.DiscardNew, cfg.MaxValueSize
	sc.AllowDirect = direct
	_, err = js.UpdateStream(ctx, sc)
	return err
}

// jsErrStoreFailed is JetStream's JSStreamStoreFailedF: the stream
// refused to store a message (nats.go names no constant for it). Its
// HTTP-like code is 503 and its description is the store's own error
// text, whatever the cause: the record bound ("maximum messages
// exceeded"), but as well a byte bound (the stream's or the account's),
// a per-subject bound, or a store that failed or closed. The code alone
// does not say which.
const jsErrStoreFailed jetstream.ErrorCode = 10077

// storeErr maps JetStream's refusals of a put into kv to the store's
// errors, by their codes: the value bound is ErrValueTooLarge; a store
// failure is ErrStoreFull only when kv's stream holds as many records as
// its record bound allows (read from the stream, not from the error's
// text). Any other store failure stays an error that is not a bound, so
// the caller answers 503 store_unavailable (retried), not registry_full
// or 429 too_many_pending_authorizations, which name a bound not hit.
func storeErr(ctx context.Context, kv jetstream.KeyValue, err error) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return err
	}
	switch apiErr.ErrorCode {
	case jetstream.JSErrCodeStreamMessageExceedsMaximum:
		return fmt.Errorf("%w (%v)", ErrValueTooLarge, err)
	case jsErrStoreFailed:
		if full, serr := atRecordBound(ctx, kv); serr != nil {
			return fmt.Errorf("relay: store failed: %w (reading the bucket's count: %v)", err, serr)
		} else if full {
			return fmt.Errorf("%w (%v)", ErrStoreFull, err)
		}
	}
	return err
}

// atRecordBound reports whether kv's stream holds as many records as its
// record bound (MaxMsgs, with DiscardNew as boundRecords sets it). A
// record expiring between the refused put and this read answers false:
// the put is then reported as a store failure, which clients retry.
func atRecordBound(ctx context.Context, kv jetstream.KeyValue) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := kv.Status(ctx)
	if err != nil {
		return false, err
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return false, fmt.Errorf("relay: bucket status of type %T", st)
	}
	info := bs.StreamInfo()
	return info.Config.MaxMsgs > 0 && info.State.Msgs >= uint64(info.Config.MaxMsgs), nil
}

// A KV operation needs its bucket's stream leader. When the NATS server
// holding it dies, the others elect another only after their RAFT
// election timeout (4 to 9 s in nats-server), and until then a put finds
// no responder and a get gets no answer, which jetstream reports only
// after its request timeout (5 s when ctx has none). So one try is
// bounded by storeTry and tried again, while ctx lasts or, when ctx has
// no deadline, for KVStoreOptions.Wait: the operation completes within
// storeTry of the new leader's election, rather than failing after 5 s
// and leaving the client to come back (the reference's executor exits on
// a plain 503 at registration).
const (
	storeTry   = time.Second
	storePause = 100 * time.Millisecond
)

// jsErrClusterNotAvail is JetStream's JSClusterNotAvailErr ("JetStream
// system temporarily unavailable"), answered while the cluster has no
// leader for the request; nats.go names no constant for it.
const jsErrClusterNotAvail jetstream.ErrorCode = 10008

// retry runs op with each try bounded by storeTry, again while its error
// is one that a new leader ends (storeTransient).
func (k *KVStore) retry(ctx context.Context, op func(context.Context) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, k.wait)
		defer cancel()
	}
	for {
		tctx, cancel := context.WithTimeout(ctx, storeTry)
		err := op(tctx)
		cancel()
		if err == nil || !storeTransient(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(storePause):
		}
	}
}

// storeTransient: no answer, no responder, a connection between servers,
// or a cluster without a leader; not an answer (not found, a lost race, a
// bound).
func storeTransient(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jsErrClusterNotAvail
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrConnectionReconnecting)
}

func regKey(env string) string { return base64.RawURLEncoding.EncodeToString([]byte(env)) }

func authKey(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

type kvReg struct {
	ID  string    `json:"id"`
	Key PublicKey `json:"key"`
	At  time.Time `json:"at"`
}

type kvAuth struct {
	Env        string    `json:"env"`
	RegID      string    `json:"reg"`
	HarnessKey PublicKey `json:"harness_key"`
	Expires    time.Time `json:"expires"`
}

func (k *KVStore) PutRegistration(ctx context.Context, env string, r Registration) error {
	b, err := json.Marshal(kvReg(r))
	if err != nil {
		return err
	}
	if len(b) > k.maxValue {
		return fmt.Errorf("%w: registration of %d bytes (bound %d)", ErrValueTooLarge, len(b), k.maxValue)
	}
	err = k.retry(ctx, func(ctx context.Context) error {
		_, err := k.regs.Put(ctx, regKey(env), b)
		return err
	})
	return storeErr(ctx, k.regs, err)
}

func (k *KVStore) get(ctx context.Context, env string) (Registration, uint64, bool, error) {
	var e jetstream.KeyValueEntry
	err := k.retry(ctx, func(ctx context.Context) (err error) {
		e, err = k.regs.Get(ctx, regKey(env))
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Registration{}, 0, false, nil
	}
	if err != nil {
		return Registration{}, 0, false, err
	}
	var v kvReg
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return Registration{}, 0, false, fmt.Errorf("relay: registration of %q: %w", env, err)
	}
	return Registration(v), e.Revision(), true, nil
}

func (k *KVStore) Registration(ctx context.Context, env string) (Registration, bool, error) {
	r, _, ok, err := k.get(ctx, env)
	return r, ok, err
}

// TouchRegistration puts the registration again (its age restarts), if
// it is still reg.
func (k *KVStore) TouchRegistration(ctx context.Context, env, reg string) error {
	r, rev, ok, err := k.get(ctx, env)
	if err != nil || !ok || r.ID != reg {
		return err
	}
	b, err := json.Marshal(kvReg(r))
	if err != nil {
		return err
	}
	err = k.retry(ctx, func(ctx context.Context) error {
		_, err := k.regs.Update(ctx, regKey(env), b, rev)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil // registered again meanwhile (or an earlier try was applied)
	}
	return err
}

func (k *KVStore) PutAuthorization(ctx context.Context, token string, a Authorization) error {
	b, err := json.Marshal(kvAuth(a))
	if err != nil {
		return err
	}
	if len(b) > k.maxValue {
		return fmt.Errorf("%w: authorization of %d bytes (bound %d)", ErrValueTooLarge, len(b), k.maxValue)
	}
	key := authKey(token)
	err = k.retry(ctx, func(ctx context.Context) error {
		_, err := k.auth.Create(ctx, key, b)
		if errors.Is(err, jetstream.ErrKeyExists) {
			// The key is the hash of a fresh random token: present
			// with this very record, it is an earlier try's, stored
			// with its answer lost.
			if e, gerr := k.auth.Get(ctx, key); gerr == nil && bytes.Equal(e.Value(), b) {
				return nil
			}
		}
		return err
	})
	return storeErr(ctx, k.auth, err)
}

func (k *KVStore) TakeAuthorization(ctx context.Context, token string) (Authorization, bool, error) {
	key := authKey(token)
	var e jetstream.KeyValueEntry
	err := k.retry(ctx, func(ctx context.Context) (err error) {
		e, err = k.auth.Get(ctx, key)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Authorization{}, false, nil
	}
	if err != nil {
		return Authorization{}, false, err
	}
	// Compare-and-delete: only the taker that deletes the revision it
	// read wins. A try whose delete was applied but whose answer was
	// lost makes the next try fail as a lost race: the authorization is
	// then refused (the harness connects again), never taken twice.
	if err := k.retry(ctx, func(ctx context.Context) error {
		return k.auth.Delete(ctx, key, jetstream.LastRevision(e.Revision()))
	}); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return Authorization{}, false, nil
		}
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
			return Authorization{}, false, nil
		}
		return Authorization{}, false, err
	}
	var v kvAuth
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return Authorization{}, false, err
	}
	return Authorization(v), true, nil
}
