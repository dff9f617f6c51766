// Package awssig signs the direct transport's requests with AWS SigV4
// (`exec-server --remote URL --remote-transport direct --aws-sigv4`): the
// credentials and region come from the AWS SDK for Go v2's default chain
// (environment, shared config and credentials files with --aws-profile,
// SSO, web identity, container and instance roles), and the signature
// from its v4 signer, so that nothing of SigV4 is written by hand here.
package awssig

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/config"
)

// DefaultService is the signing service of --aws-service.
const DefaultService = "execute-api"

// ErrNoRegion is the reference's refusal when neither --aws-region nor
// the SDK's region chain gives a region.
var ErrNoRegion = errors.New("AWS SDK config did not resolve a region")

// Signer signs requests for one service and region with credentials that
// the SDK refreshes as they expire.
type Signer struct {
	creds   aws.CredentialsProvider
	signer  *v4.Signer
	region  string
	service string
	now     func() time.Time
}

// New loads the SDK's default configuration for profile (when not "")
// and region (when not "", else the SDK's region chain).
func New(ctx context.Context, profile, region, service string) (*Signer, error) {
	var opts []func(*config.LoadOptions) error
	if profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(profile))
	}
	if region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, err
	}
	if cfg.Region == "" {
		return nil, ErrNoRegion
	}
	if service == "" {
		service = DefaultService
	}
	if cfg.Credentials == nil {
		return nil, errors.New("AWS SDK config did not resolve credentials")
	}
	return &Signer{creds: cfg.Credentials, signer: v4.NewSigner(), region: cfg.Region, service: service, now: time.Now}, nil
}

// Static is a Signer with fixed credentials (tests, and a relay checking
// a signature with a known key).
func Static(accessKey, secretKey, sessionToken, region, service string) *Signer {
	if service == "" {
		service = DefaultService
	}
	return &Signer{
		creds: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: accessKey, SecretAccessKey: secretKey, SessionToken: sessionToken}, nil
		}),
		signer:  v4.NewSigner(),
		region:  region,
		service: service,
		now:     time.Now,
	}
}

// Region and Service are what the signatures are scoped to.
func (s *Signer) Region() string  { return s.region }
func (s *Signer) Service() string { return s.service }

// Sign sets Authorization, X-Amz-Date (and X-Amz-Security-Token with
// temporary credentials) on req for body (nil: an empty payload). Only
// host, x-amz-date and the headers req already has are signed, and not
// Content-Length: sign before adding headers that are not to be covered,
// as the reference signs register over content-type;host;x-amz-date and
// the websocket upgrade over host;x-amz-date.
func (s *Signer) Sign(ctx context.Context, req *http.Request, body []byte) error {
	creds, err := s.creds.Retrieve(ctx)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	// A copy without a length: the SDK would sign Content-Length too.
	c := req.Clone(ctx)
	c.ContentLength = 0
	c.Body = nil
	if err := s.signer.SignHTTP(ctx, creds, c, hex.EncodeToString(sum[:]), s.service, s.region, s.now().UTC()); err != nil {
		return err
	}
	for _, h := range []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token"} {
		if v := c.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	return nil
}

// MaxSkew is how far a signed request's X-Amz-Date may be from the
// verifier's clock (AWS's own rule: 15 minutes).
const MaxSkew = 15 * time.Minute

var credentialRe = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=([A-Za-z0-9]+)/(\d{8})/([a-z0-9-]+)/([A-Za-z0-9._-]+)/aws4_request, ?SignedHeaders=([a-z0-9;.-]+), ?Signature=([0-9a-f]{64})$`)

// Verify checks req's SigV4 signature over body (nil: empty) with the
// secret that secrets holds for its access key id, as a self-hosted
// registry does (exec-relay's direct transport): it recomputes the
// signature with the SDK's signer over the headers the request names as
// signed (host and x-amz-date among them), within MaxSkew of now. A
// request with temporary credentials (X-Amz-Security-Token) is refused:
// only an STS-aware service could check those. It returns the access key
// id.
func Verify(req *http.Request, body []byte, secrets func(keyID string) (string, bool), now time.Time) (string, error) {
	m := credentialRe.FindStringSubmatch(req.Header.Get("Authorization"))
	if m == nil {
		return "", errors.New("no AWS4-HMAC-SHA256 authorization")
	}
	keyID, day, region, service, signed := m[1], m[2], m[3], m[4], m[5]
	if req.Header.Get("X-Amz-Security-Token") != "" {
		return "", errors.New("temporary credentials are not accepted")
	}
	at, err := time.Parse("20060102T150405Z", req.Header.Get("X-Amz-Date"))
	if err != nil || at.Format("20060102") != day {
		return "", errors.New("bad X-Amz-Date")
	}
	if d := now.Sub(at); d > MaxSkew || d < -MaxSkew {
		return "", errors.New("signature expired or from the future")
	}
	names := strings.Split(signed, ";")
	if !slices.Contains(names, "host") || !slices.Contains(names, "x-amz-date") {
		return "", errors.New("host and x-amz-date must be signed")
	}
	secret, ok := secrets(keyID)
	if !ok {
		return "", errors.New("unknown access key")
	}
	c, err := http.NewRequest(req.Method, "http://"+req.Host+req.URL.RequestURI(), nil)
	if err != nil {
		return "", err
	}
	for _, h := range names {
		if h != "host" && h != "x-amz-date" && h != "content-length" {
			c.Header[http.CanonicalHeaderKey(h)] = req.Header.Values(h)
		}
	}
	if slices.Contains(names, "content-length") {
		c.ContentLength = int64(len(body))
	}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(req.Context(), aws.Credentials{AccessKeyID: keyID, SecretAccessKey: secret}, c, hex.EncodeToString(sum[:]), service, region, at); err != nil {
		return "", err
	}
	if subtle.ConstantTimeCompare([]byte(c.Header.Get("Authorization")), []byte(req.Header.Get("Authorization"))) != 1 {
		return "", errors.New("signature does not match")
	}
	return keyID, nil
}
