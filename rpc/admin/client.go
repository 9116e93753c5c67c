package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"time"

	"github.com/choirhq/choir/rpc/wire"
	"github.com/choirhq/choir/strictjson"
)

// ErrNotRunning is matched by the error Client returns when nothing serves
// the admin socket.
var ErrNotRunning = errors.New("choird is not running")

// NotRunningError says that choird is not running, and why the client
// thinks so, in one line.
type NotRunningError struct {
	Path string
	// Stale is true when the socket file exists but refuses connections
	// (choird died without removing it); false when there is no socket.
	Stale bool
}

func (e *NotRunningError) Error() string {
	if e.Stale {
		return fmt.Sprintf("choird is not running (socket %s refuses connections); start it with: choird", e.Path)
	}
	return fmt.Sprintf("choird is not running (no socket at %s); start it with: choird", e.Path)
}

// Is matches ErrNotRunning.
func (e *NotRunningError) Is(target error) bool { return target == ErrNotRunning }

// MaxResponseBytes caps an admin response.
const MaxResponseBytes = 16 << 20

// Client calls choird's admin API. It is safe for concurrent use.
type Client struct {
	path string
	hc   *http.Client
}

// NewClient returns a client for the admin socket at path (see
// SocketPath). It does not connect until the first call.
func NewClient(path string) *Client {
	c := &Client{path: path}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "unix", path)
			switch {
			case err == nil:
				return conn, nil
			case errors.Is(err, fs.ErrNotExist):
				return nil, &NotRunningError{Path: path}
			case errors.Is(err, syscall.ECONNREFUSED):
				return nil, &NotRunningError{Path: path, Stale: true}
			case errors.Is(err, fs.ErrPermission):
				return nil, fmt.Errorf("cannot reach choird at %s: permission denied; run choirctl as the user that runs choird", path)
			}
			return nil, fmt.Errorf("cannot reach choird at %s: %w", path, err)
		},
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	c.hc = &http.Client{Transport: tr}
	return c
}

// Close releases idle connections.
func (c *Client) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

// Do sends in (nil for no body) as JSON to method path and decodes the
// response strictly into out (nil to discard it). An error response comes
// back as an *wire.Error; an unreachable choird as a *NotRunningError or a
// one-line error naming the socket.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("choird %s %s: encode request: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://choird"+path, body)
	if err != nil {
		return fmt.Errorf("choird %s %s: %w", method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.hc.Do(req)
	if err != nil {
		// Say it without the URL noise net/http adds.
		var nr *NotRunningError
		if errors.As(err, &nr) {
			return nr
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("choird %s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, MaxResponseBytes+1))
	if err != nil {
		return fmt.Errorf("choird %s %s: read response: %w", method, path, err)
	}
	if len(b) > MaxResponseBytes {
		return fmt.Errorf("choird %s %s: response over %d bytes", method, path, MaxResponseBytes)
	}
	if res.StatusCode != http.StatusOK {
		var eb wire.ErrorBody
		if err := strictjson.Decode(b, &eb, strictjson.Limits{MaxDepth: 4}); err != nil || eb.Code == "" {
			return fmt.Errorf("choird %s %s: HTTP %d: %.200s", method, path, res.StatusCode, bytes.TrimSpace(b))
		}
		return fmt.Errorf("choird: %w", eb.Err())
	}
	if out == nil {
		return nil
	}
	if err := strictjson.Decode(b, out, strictjson.Limits{MaxBytes: MaxResponseBytes}); err != nil {
		return fmt.Errorf("choird %s %s: malformed response: %s", method, path, oneLine(err))
	}
	return nil
}

// Status returns choird's status.
func (c *Client) Status(ctx context.Context) (StatusResponse, error) {
	var s StatusResponse
	if err := c.Do(ctx, http.MethodGet, PathStatus, nil, &s); err != nil {
		return StatusResponse{}, err
	}
	if err := s.Validate(); err != nil {
		return StatusResponse{}, fmt.Errorf("choird GET %s: malformed response: %w", PathStatus, err)
	}
	return s, nil
}
