package mailbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// The calls of choird's mail route (issue 34), each a POST of JSON to
// <route>/<call>: a [Submission] to send, a [Query] to fetch, a
// [CheckQuery] to check. choird does the SMTP and IMAP with the
// account's password, which never reaches the agent; a refusal or
// failure answers an [ErrorBody].
const (
	Service   = "mail"
	CallSend  = "send"
	CallFetch = "fetch"
	CallCheck = "check"
)

// ErrorBody is the answer of a refused or failed call of the mail route.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail says what went wrong: a code the tools branch on (this
// package's, or a policy refusal's), what, and what to do.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty"`
}

// maxAnswerBytes bounds an answer of the mail route read by Remote: a
// page at its largest cap, in base64, and its JSON.
const maxAnswerBytes = 4*DefaultMaxPageBytes/3 + 8<<20

// Remote reaches an account through choird's mail route: the agent's
// side when it has an egress gateway. It has the same methods as Direct.
type Remote struct {
	// URL is the account's route, http://choir-egress/svc/mail/<account>.
	URL string
	// Client sends the calls; nil is http.DefaultClient (the agent's
	// default transport goes to the gateway).
	Client *http.Client
}

// Send asks choird to submit sub. choird sends a Message-ID once: asked
// again, it answers the first outcome.
func (r Remote) Send(ctx context.Context, sub Submission) (Sent, error) {
	var out Sent
	return out, r.call(ctx, CallSend, sub, &out)
}

// Fetch asks choird to read a page of a folder.
func (r Remote) Fetch(ctx context.Context, q Query) (Page, error) {
	var out Page
	return out, r.call(ctx, CallFetch, q, &out)
}

// Check asks choird to summarise the folders.
func (r Remote) Check(ctx context.Context, q CheckQuery) (Summary, error) {
	var out Summary
	return out, r.call(ctx, CallCheck, q, &out)
}

func (r Remote) call(ctx context.Context, call string, in, out any) error {
	server := "choird mail route " + call
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encode %s: %w", call, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL+"/"+call, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s: %w", server, err)
	}
	req.Header.Set("Content-Type", "application/json")
	c := r.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return unreachable(server, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return unreachable(server, err)
	}
	if len(data) > maxAnswerBytes {
		return &Error{Code: CodeServer, Server: server, Err: errors.New("the answer is over the size bound"), Hint: "ask for fewer messages"}
	}
	if resp.StatusCode != http.StatusOK {
		var eb ErrorBody
		if json.Unmarshal(data, &eb) != nil || eb.Error.Code == "" {
			return &Error{Code: CodeServer, Server: server, Err: fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, data),
				Hint: "choird did not answer as its mail route does; try again later"}
		}
		return &Error{Code: eb.Error.Code, Server: server, Err: errors.New(eb.Error.Message), Hint: eb.Error.Hint}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &Error{Code: CodeServer, Server: server, Err: fmt.Errorf("decode the answer: %w", err), Hint: "try again later"}
	}
	return nil
}
