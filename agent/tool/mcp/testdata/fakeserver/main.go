// Command fakeserver is a stdio MCP server for the mcp package's tests,
// built with the same SDK as the client.
package main

import (
	"context"
	"encoding/json"
	"log"
	"os"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	s := sdk.NewServer(&sdk.Implementation{Name: "fake", Version: "1"}, nil)
	obj := func(props string, req ...string) json.RawMessage {
		r, _ := json.Marshal(append([]string{}, req...))
		return json.RawMessage(`{"type":"object","properties":{` + props + `},"required":` + string(r) + `}`)
	}
	text := func(s string) *sdk.CallToolResult {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
	}
	args := func(r *sdk.CallToolRequest) map[string]string {
		var m map[string]string
		json.Unmarshal(r.Params.Arguments, &m) //nolint:errcheck
		return m
	}
	s.AddTool(&sdk.Tool{Name: "write_note", Description: "Write a note file in the workspace.",
		InputSchema: obj(`"path":{"type":"string"},"text":{"type":"string"}`, "path", "text")},
		func(_ context.Context, r *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			a := args(r)
			if err := os.WriteFile(a["path"], []byte(a["text"]), 0o600); err != nil {
				return nil, err
			}
			return text("wrote " + a["path"]), nil
		})
	s.AddTool(&sdk.Tool{Name: "read_note", Description: "Read a note file.", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: obj(`"path":{"type":"string"}`, "path")},
		func(_ context.Context, r *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			b, err := os.ReadFile(args(r)["path"])
			if err != nil {
				return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: err.Error()}}}, nil
			}
			return text(string(b)), nil
		})
	// append_entry takes an idempotency key: an entry whose key the file
	// already holds is not appended again.
	s.AddTool(&sdk.Tool{Name: "append_entry", Description: "Append an entry to a file, once per idempotency key.",
		InputSchema: obj(`"path":{"type":"string"},"text":{"type":"string"},"idempotency_key":{"type":"string"}`,
			"path", "text", "idempotency_key")},
		func(_ context.Context, r *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			a := args(r)
			old, _ := os.ReadFile(a["path"])
			line := a["idempotency_key"] + " " + a["text"] + "\n"
			if a["idempotency_key"] != "" && strings.Contains(string(old), a["idempotency_key"]+" ") {
				return text("already appended under " + a["idempotency_key"]), nil
			}
			f, err := os.OpenFile(a["path"], os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			if _, err := f.WriteString(line); err != nil {
				return nil, err
			}
			return text("appended"), nil
		})
	s.AddTool(&sdk.Tool{Name: "crash", Description: "Exit in the middle of the call.", InputSchema: obj(``)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			os.Exit(3)
			return nil, nil
		})
	s.AddTool(&sdk.Tool{Name: "env", Description: "Print the environment.", InputSchema: obj(``)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return text(strings.Join(os.Environ(), "\n")), nil
		})
	if os.Getenv("FAKE_BAD_SCHEMA") != "" {
		s.AddTool(&sdk.Tool{Name: "broken", Description: "Has an invalid schema.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"x":{"type":"nonsense"}}}`)},
			func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) { return text(""), nil })
	}
	if os.Getenv("FAKE_CLASH") != "" {
		s.AddTool(&sdk.Tool{Name: "exec", Description: "Clashes with choir.exec.", InputSchema: obj(``)},
			func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) { return text(""), nil })
	}
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
