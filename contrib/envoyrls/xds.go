package envoyrls

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// XDSOptions configure an XDS client: envoyproxy/ratelimit's
// CONFIG_TYPE=GRPC_XDS_SOTW and its CONFIG_GRPC_XDS_* variables.
type XDSOptions struct {
	// ServerURL is the management server's gRPC target, host:port
	// (CONFIG_GRPC_XDS_SERVER_URL). Required.
	ServerURL string
	// NodeID is the node this client is to the server, whose snapshots
	// are per node (CONFIG_GRPC_XDS_NODE_ID). Default "default".
	NodeID string
	// NodeMetadata is the node's metadata, string values
	// (CONFIG_GRPC_XDS_NODE_METADATA).
	NodeMetadata map[string]string
	// Headers are sent as gRPC metadata with the stream
	// (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS).
	Headers map[string]string
	// TLS, when not nil, is the connection's TLS configuration; nil:
	// plaintext.
	TLS *tls.Config
	// RetryInterval is the wait, with ±50% jitter, before connecting again
	// after a failed attempt or a stream that ended
	// (CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL), and before NACKing
	// again a snapshot the server sends again unchanged after a NACK.
	// Default 3s.
	RetryInterval time.Duration
	// MaxRecvMsgSize bounds a response's size (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES);
	// 0: gRPC's default, 4 MiB.
	MaxRecvMsgSize int
	// OnConfig, if set, is called with each configuration put in force,
	// after the Server's swap.
	OnConfig func(*Config)
	Logger   *slog.Logger // default slog.Default()
}

// XDS keeps a Server's configuration that of a management server's
// RateLimitConfig resources, over the aggregated discovery service's
// state-of-the-world protocol (go-control-plane's SOTW client), as
// envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW. The resources of a
// response are one configuration, a domain each, loaded as files are
// (ConfigFromXDS): one that loads is put in force (the Server's swap a
// Reloader does) and ACKed; one that does not is NACKed with its error,
// counted and logged once, and the last good one stays in force. The same
// refused resources sent again are NACKed again without being read again,
// logged or counted, after RetryInterval: a server that answers each NACK
// at once with the same snapshot sends it once per interval, not in a
// loop.
type XDS struct {
	server *Server
	opts   XDSOptions
	node   *corev3.Node

	first     chan struct{} // closed once a first response is handled
	firstOnce sync.Once

	// the last resources put in force and refused, and the refusal's
	// error (the stream's goroutine only)
	accepted, rejected       []*anypb.Any
	hasAccepted, hasRejected bool
	rejectedErr              error

	mu       sync.Mutex
	loadedAt time.Time
	err      error // of the last response, if it was refused
	errAt    time.Time
}

// NewXDS returns an XDS client for s; Run connects it.
func NewXDS(s *Server, opts XDSOptions) (*XDS, error) {
	if opts.ServerURL == "" {
		return nil, errors.New("envoyrls: XDSOptions.ServerURL is empty")
	}
	if opts.NodeID == "" {
		opts.NodeID = "default"
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = 3 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	md := map[string]*structpb.Value{}
	for k, v := range opts.NodeMetadata {
		md[k] = structpb.NewStringValue(v)
	}
	return &XDS{
		server: s, opts: opts, first: make(chan struct{}),
		node: &corev3.Node{Id: opts.NodeID, Metadata: &structpb.Struct{Fields: md}},
	}, nil
}

// FirstResponse is closed once the client has handled a first response of
// the server: a configuration put in force, or refused.
func (x *XDS) FirstResponse() <-chan struct{} { return x.first }

// Status is when the configuration in force was loaded (zero: none yet),
// and the error of the last response if it was refused (since then).
func (x *XDS) Status() (loadedAt, errAt time.Time, err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.loadedAt, x.errAt, x.err
}

// Run connects to the management server and follows its configuration
// until ctx ends, connecting again (after RetryInterval) whenever the
// connection fails or the stream ends.
func (x *XDS) Run(ctx context.Context) {
	for {
		err := x.session(ctx)
		if ctx.Err() != nil {
			return
		}
		wait := x.jittered()
		x.opts.Logger.Error("xDS: no stream with the management server; connecting again", "server", x.opts.ServerURL, "in", wait.Round(time.Millisecond), "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// jittered is RetryInterval ±50%.
func (x *XDS) jittered() time.Duration {
	d := x.opts.RetryInterval
	return d/2 + rand.N(d+1)
}

// session is one connection and its stream, until either fails.
func (x *XDS) session(ctx context.Context) error {
	creds := insecure.NewCredentials()
	if x.opts.TLS != nil {
		creds = credentials.NewTLS(x.opts.TLS)
	}
	dopts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if x.opts.MaxRecvMsgSize > 0 {
		dopts = append(dopts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(x.opts.MaxRecvMsgSize)))
	}
	conn, err := grpc.NewClient(x.opts.ServerURL, dopts...)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	sctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, metadata.New(x.opts.Headers)))
	defer cancel()
	client := sotw.NewADSClient(sctx, x.node, resource.RateLimitConfigType)
	if err := client.InitConnect(conn); err != nil {
		return err
	}
	x.opts.Logger.Info("xDS: stream open", "server", x.opts.ServerURL, "node", x.opts.NodeID)
	for {
		resp, err := client.Fetch()
		if err != nil {
			return err
		}
		if err := x.handle(sctx, client, resp.Resources); err != nil {
			return err
		}
	}
}

// handle puts a response's resources in force and ACKs them, or NACKs
// them.
func (x *XDS) handle(ctx context.Context, client sotw.ADSClient, res []*anypb.Any) error {
	defer x.firstOnce.Do(func() { close(x.first) })
	if x.hasRejected && sameResources(res, x.rejected) {
		t := time.NewTimer(x.jittered())
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		return client.Nack(x.rejectedErr.Error())
	}
	if x.hasAccepted && sameResources(res, x.accepted) {
		// the configuration in force (a new stream, or the server back to
		// it after a refused one)
		x.hasRejected, x.rejected = false, nil
		x.mu.Lock()
		x.err = nil
		x.mu.Unlock()
		return client.Ack()
	}
	cfg, names, err := configOfResources(res)
	if err != nil {
		x.hasRejected, x.rejected, x.rejectedErr = true, res, err
		x.server.metrics.ConfigLoaded(false)
		x.mu.Lock()
		x.err, x.errAt = err, time.Now()
		x.mu.Unlock()
		x.opts.Logger.Error("xDS: configuration refused (NACK): the last good one stays in force", "resources", strings.Join(names, ","), "err", err)
		return client.Nack(err.Error())
	}
	x.server.SetConfig(cfg)
	x.server.metrics.ConfigLoaded(true)
	x.hasAccepted, x.accepted = true, res
	x.hasRejected, x.rejected = false, nil
	x.mu.Lock()
	x.loadedAt, x.err = time.Now(), nil
	x.mu.Unlock()
	x.opts.Logger.Info("xDS: configuration loaded", "resources", strings.Join(names, ","), "domains", strings.Join(cfg.Domains(), ","))
	if x.opts.OnConfig != nil {
		x.opts.OnConfig(cfg)
	}
	return client.Ack()
}

// sameResources: a and b are the same resources, byte for byte (the
// server marshals them deterministically).
func sameResources(a, b []*anypb.Any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].GetTypeUrl() != b[i].GetTypeUrl() || !bytes.Equal(a[i].GetValue(), b[i].GetValue()) {
			return false
		}
	}
	return true
}

// configOfResources unmarshals res (RateLimitConfig resources) and loads
// them (ConfigFromXDS); names are the resources' names.
func configOfResources(res []*anypb.Any) (cfg *Config, names []string, err error) {
	confs := make([]*rlsconfv3.RateLimitConfig, 0, len(res))
	for _, r := range res {
		c := &rlsconfv3.RateLimitConfig{}
		if err := anypb.UnmarshalTo(r, c, proto.UnmarshalOptions{}); err != nil {
			return nil, names, fmt.Errorf("error while unmarshalling config from xDS Management Server: %w", err)
		}
		confs = append(confs, c)
		names = append(names, c.GetName())
	}
	cfg, err = ConfigFromXDS(confs...)
	return cfg, names, err
}

// ConfigFromXDS loads RateLimitConfig resources (a domain each) as
// ParseConfig loads files, with the same checks and messages, each
// resource's name in place of a file's: envoyproxy/ratelimit's conversion
// of the resource to its YAML's structure, then its loader.
func ConfigFromXDS(confs ...*rlsconfv3.RateLimitConfig) (*Config, error) {
	c := &Config{domains: map[string]*node{}}
	for _, conf := range confs {
		root := &yamlRoot{Domain: conf.GetDomain(), Descriptors: xdsDescriptors(conf.GetDescriptors())}
		if err := c.add(conf.GetName(), root); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func xdsDescriptors(pb []*rlsconfv3.RateLimitDescriptor) []yamlDescriptor {
	ds := make([]yamlDescriptor, len(pb))
	for i, d := range pb {
		ds[i] = yamlDescriptor{
			Key:            d.GetKey(),
			Value:          d.GetValue(),
			RateLimit:      xdsRateLimit(d.GetRateLimit()),
			Descriptors:    xdsDescriptors(d.GetDescriptors()),
			ShadowMode:     d.GetShadowMode(),
			DetailedMetric: d.GetDetailedMetric(),
		}
	}
	return ds
}

func xdsRateLimit(pb *rlsconfv3.RateLimitPolicy) *yamlRateLimit {
	if pb == nil {
		return nil
	}
	rl := &yamlRateLimit{
		RequestsPerUnit: pb.GetRequestsPerUnit(),
		Unit:            pb.GetUnit().String(),
		Unlimited:       pb.GetUnlimited(),
		Name:            pb.GetName(),
	}
	for _, r := range pb.GetReplaces() {
		rl.Replaces = append(rl.Replaces, yamlReplaces{Name: r.GetName()})
	}
	return rl
}
