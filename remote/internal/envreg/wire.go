package envreg

import "github.com/execgo/exec-server/remote/noise"

// The registry's HTTP contract (docs/remote.md): the bodies of
// /cloud/environment/{id}/{verb}, as sent by the executor and the harness
// and answered by remote/relay. Fields are in the order encoding/json
// writes a map's keys (sorted), so that these structs encode to the same
// bytes as the maps the three sides built before they shared them.

// SecurityProfile is the registration profile of the Noise transport, the
// only one the registry knows.
const SecurityProfile = "noise_hybrid_ik_v1"

// DirectTransport is the transport id of the direct registration
// (POST …/direct/register).
const DirectTransport = "direct_jsonrpc_v1"

// StreamIDHeader carries the Noise stream id on /validate.
const StreamIDHeader = "X-Codex-Noise-Stream-Id"

// Error codes of the registry's answers (ErrorBody.Error.Code). The
// clients classify failures by these, never by the message.
const (
	CodeUnauthorized                     = "unauthorized"
	CodeInvalidRequest                   = "invalid_request"
	CodeBadRequest                       = "bad_request" // the direct registration's wording of invalid_request
	CodeInvalidEnvironmentID             = "invalid_environment_id"
	CodeUnsupportedSecurityProfile       = "unsupported_security_profile"
	CodeRegistryFull                     = "registry_full"
	CodeStoreUnavailable                 = "store_unavailable"
	CodeEnvironmentOffline               = "environment_offline"
	CodeTooManyPendingAuthorizations     = "too_many_pending_authorizations"
	CodeTooManyConnections               = "too_many_connections"
	CodeRegistrationConflict             = "registration_conflict"              // retried by the executor (503)
	CodeAuthenticationServiceUnavailable = "authentication_service_unavailable" // retried by the executor (502)
)

// Error is the error member of a registry's non-2xx answer.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ErrorBody is a registry's non-2xx answer: {"error":{"code":…,"message":…}}.
type ErrorBody struct {
	Error Error `json:"error"`
}

// RegisterRequest is the executor's POST …/register.
type RegisterRequest struct {
	ExecutorPublicKey *noise.PublicKey `json:"executor_public_key"`
	SecurityProfile   string           `json:"security_profile"`
}

// Registration is the registry's answer to …/register.
type Registration struct {
	EnvironmentID          string `json:"environment_id"`
	ExecutorRegistrationID string `json:"executor_registration_id"`
	SecurityProfile        string `json:"security_profile"`
	URL                    string `json:"url"` // the executor's rendezvous websocket
}

// ConnectRequest is the harness's POST …/connect.
type ConnectRequest struct {
	HarnessPublicKey *noise.PublicKey `json:"harness_public_key"`
}

// Bundle is the registry's answer to …/connect: what the harness needs to
// dial the rendezvous and run the handshake (single-use).
type Bundle struct {
	EnvironmentID           string          `json:"environment_id"`
	ExecutorPublicKey       noise.PublicKey `json:"executor_public_key"`
	ExecutorRegistrationID  string          `json:"executor_registration_id"`
	HarnessKeyAuthorization string          `json:"harness_key_authorization"`
	SecurityProfile         string          `json:"security_profile"`
	URL                     string          `json:"url"` // the harness's rendezvous websocket
}

// ValidateRequest is the executor's POST …/validate of a harness's
// handshake (with StreamIDHeader).
type ValidateRequest struct {
	ExecutorRegistrationID  string           `json:"executor_registration_id"`
	HarnessKeyAuthorization string           `json:"harness_key_authorization"`
	HarnessPublicKey        *noise.PublicKey `json:"harness_public_key"`
}

// ValidateResponse is the registry's answer to …/validate.
type ValidateResponse struct {
	Valid bool `json:"valid"`
}

// DirectRegisterRequest is the executor's POST …/direct/register.
type DirectRegisterRequest struct {
	Transport string `json:"transport"` // DirectTransport
}

// DirectRegistration is the registry's answer to …/direct/register.
type DirectRegistration struct {
	EnvironmentID  string `json:"environment_id"`
	RegistrationID string `json:"registration_id"`
	Transport      string `json:"transport"`
	URL            string `json:"url"` // the executor's direct websocket
}
