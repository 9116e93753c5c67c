package web

import (
	"encoding/json"

	"github.com/choirhq/choir/agent/tool"
)

// browseSpec declares choir.web.browse, which choird's browser worker runs
// (daemon/browser) in the agent's own browser context.
var browseSpec = tool.Spec{
	LLM: tool.LLMView{
		Name: NameBrowse,
		Description: "Browse with a real browser (JavaScript runs) in your own private browser context: open url in a tab, " +
			"run actions (navigate, click a selector, type text into a selector, wait for a selector, scroll, back), " +
			"then read the page as mode text (readable main content), html, links (with anchor text), screenshot " +
			"(a PNG saved to .choirtmp/send/, ready for choir.send.file) or pdf (saved to .choirtmp/send/). " +
			"Tabs keep their page and cookies between calls; name them with tab. Only public http and https sites are reachable.",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "url": {"type": "string", "minLength": 1, "maxLength": 8192, "description": "Open this http or https URL first."},
    "tab": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,32}$", "description": "Tab name (default main)."},
    "mode": {"type": "string", "enum": ["text", "html", "links", "screenshot", "pdf"], "description": "What to return (default text)."},
    "actions": {"type": "array", "maxItems": 32, "items": {
      "type": "object",
      "properties": {
        "action": {"type": "string", "enum": ["navigate", "click", "type", "wait", "scroll", "back"]},
        "url": {"type": "string", "minLength": 1, "description": "navigate: the URL."},
        "selector": {"type": "string", "minLength": 1, "description": "click, type, wait, scroll: a CSS selector."},
        "text": {"type": "string", "description": "type: the text to type."},
        "pixels": {"type": "integer", "description": "scroll without selector: pixels down (negative: up); default one screen."},
        "timeout_ms": {"type": "integer", "minimum": 1, "maximum": 120000, "description": "wait: how long to wait."}
      },
      "required": ["action"],
      "additionalProperties": false,
      "allOf": [
        {"if": {"properties": {"action": {"const": "navigate"}}}, "then": {"required": ["url"]}},
        {"if": {"properties": {"action": {"enum": ["click", "type", "wait"]}}}, "then": {"required": ["selector"]}},
        {"if": {"properties": {"action": {"const": "type"}}}, "then": {"required": ["text"]}}
      ]
    }},
    "full_page": {"type": "boolean", "description": "screenshot: the whole page, not just the viewport."},
    "close_tab": {"type": "boolean", "description": "Close the tab after this call."}
  },
  "additionalProperties": false
}`),
	},
	Runtime: tool.Runtime{TimeoutMS: 180_000, SideEffect: tool.SideEffectExternal, Version: "1.0", Host: true, Network: true,
		// Screenshots and PDFs are written to .choirtmp/send under unique
		// names, so a shared choirtmp lock beside the tab's is enough.
		Locks: []tool.LockTemplate{{Resource: "browser_tab", Mode: tool.ModeExclusive}, {Resource: "choirtmp", Mode: tool.ModeShared}}},
}
