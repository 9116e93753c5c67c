package admin

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// The paths of choirctl console: whoever reaches the admin socket is the
// operator, so the socket is where a console login starts.
const (
	PathConsoleLogin         = "/v1/console/login"
	PathConsoleSessions      = "/v1/console/sessions"
	PathConsoleSessionRevoke = "/v1/console/sessions/{id}/revoke"
)

// ConsoleLogin is a one-time link into the web console: its token is
// exchanged once, before ExpiresAt, for a session cookie.
type ConsoleLogin struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

// ConsoleSession is one login to the web console. Its ID's first eight
// characters name it in the audit views ("console:<prefix>").
type ConsoleSession struct {
	ID         string     `json:"session_id"`
	Actor      string     `json:"actor"`
	CreatedBy  string     `json:"created_by"`
	UserAgent  string     `json:"user_agent,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	LastSeenAt time.Time  `json:"last_seen_at"`
	ExpiresAt  time.Time  `json:"expires_at"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	RevokedBy  string     `json:"revoked_by,omitempty"`
}

// ConsoleRevoked lists the sessions a revoke ended.
type ConsoleRevoked struct {
	Revoked []string `json:"revoked"`
}

// ConsoleLogin asks choird for a one-time console link.
func (c *Client) ConsoleLogin(ctx context.Context) (ConsoleLogin, error) {
	return call[ConsoleLogin](ctx, c, http.MethodPost, PathConsoleLogin, nil)
}

// ConsoleSessions lists the console's sessions of the last day, newest
// first.
func (c *Client) ConsoleSessions(ctx context.Context) ([]ConsoleSession, error) {
	return call[[]ConsoleSession](ctx, c, http.MethodGet, PathConsoleSessions, nil)
}

// ConsoleSessionRevoke ends the live console sessions whose id starts
// with prefix (at least eight characters).
func (c *Client) ConsoleSessionRevoke(ctx context.Context, prefix string) (ConsoleRevoked, error) {
	return call[ConsoleRevoked](ctx, c, http.MethodPost, Fill(PathConsoleSessionRevoke, prefix), nil)
}

// ConsoleSessionsText renders a listing for a terminal.
func ConsoleSessionsText(list []ConsoleSession, now time.Time) string {
	if len(list) == 0 {
		return "No console sessions in the last day. Log in with: choirctl console\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s %-8s %-20s %-20s %s\n", "SESSION", "STATE", "CREATED", "LAST SEEN", "BROWSER")
	for _, s := range list {
		state := "live"
		switch {
		case s.RevokedAt != nil:
			state = "revoked"
		case !now.Before(s.ExpiresAt):
			state = "expired"
		}
		ua := s.UserAgent
		if len(ua) > 40 {
			ua = ua[:40] + "…"
		}
		fmt.Fprintf(&b, "%-10s %-8s %-20s %-20s %s\n", s.ID[:min(8, len(s.ID))], state, s.CreatedAt.Local().Format(time.DateTime),
			s.LastSeenAt.Local().Format(time.DateTime), ua)
	}
	return b.String()
}
