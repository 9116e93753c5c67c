package agent

import (
	"context"
	"log/slog"
	"net"
	"net/http"

	"github.com/choirhq/choir/agent/netout"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/proc"
	"github.com/choirhq/choir/rpc/egress"
)

// startEgress routes every connection of the agent through choird's egress
// gateway when choird gives it one (issue 34): the agent's own HTTP
// clients (the model, search, speech, Notion) through
// http.DefaultTransport, which is replaced here before any client copies
// it, and the tools through a local proxy on the loopback whose address
// their environment carries and which it returns (git's configuration
// names it too: gitRoutes). In a container nothing else has a route out;
// under the process runtime a tool that ignores the proxy variables goes
// around it, which choird says when it starts the agent.
func startEgress(ctx context.Context, opts Options, logger *slog.Logger) (*netout.Dialer, string, error) {
	if opts.EgressSocket == "" {
		return nil, "", nil
	}
	token := opts.LeaseToken
	d := &netout.Dialer{Socket: opts.EgressSocket, SessionID: opts.SessionID, LeaseTokenFunc: func() string { return token }}
	http.DefaultTransport = d.Transport(egress.OriginService)
	local := &netout.Local{Dialer: d}
	if err := local.Listen(ctx); err != nil {
		return nil, "", err
	}
	proc.SetProxyEnv(netout.ProxyEnv(local.Addr()))
	// A call of choir.exec or an external tool gets a proxy of its own,
	// which names its lane and the lane's untrusted sources in the audit
	// and on an approval.
	proc.SetCallProxy(func(cctx context.Context) ([]string, func()) {
		srcs, lane := tool.LaneSources(cctx), tool.LaneName(cctx)
		if len(srcs) == 0 && lane == "" {
			return nil, nil
		}
		lctx, cancel := context.WithCancel(ctx)
		l := &netout.Local{Dialer: d, Lane: lane, Sources: srcs}
		if err := l.Listen(lctx); err != nil {
			cancel()
			logger.Warn("no proxy of the call's own; its children use the agent's", slog.String("error", err.Error()))
			return nil, nil
		}
		return netout.ProxyEnv(l.Addr()), cancel
	})
	logger.Info("connections go out through choird's egress gateway", slog.String("socket", opts.EgressSocket),
		slog.String("tool_proxy", local.Addr()))
	if opts.Sandboxed {
		if names := routedInterfaces(); len(names) > 0 {
			logger.Warn("the container has a network beside its loopback: a command that ignores the proxy variables "+
				"can go around the egress gateway", slog.Any("interfaces", names))
		}
	}
	return d, local.Addr(), nil
}

// routedInterfaces names the network interfaces that are up, other than
// the loopback: none in a container started with no network.
func routedInterfaces() []string {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var out []string
	for _, i := range ifs {
		if i.Flags&net.FlagUp != 0 && i.Flags&net.FlagLoopback == 0 {
			out = append(out, i.Name)
		}
	}
	return out
}

// builtinDial is the dial function of one of the agent's own clients
// (origin "builtin:<client>"), carrying the lane's untrusted sources; nil
// without a gateway, and the client dials as before.
func (s *session) builtinDial(client string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if s.egress == nil {
		return nil
	}
	dial := s.egress.DialFunc(egress.OriginBuiltinPrefix + client)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return dial(netout.WithLane(ctx, tool.LaneName(ctx), tool.LaneSources(ctx)), network, addr)
	}
}
