package builtin

import (
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/notion"
	"github.com/choirhq/choir/agent/tool/tts"
)

// serviceTools are the built-in tools that call an outside service with a
// resource leased to the session: choir.notion.query and choir.tts.speak.
// They are in every registry, the image build's included, so that a skill
// may name them; each obtains only its own binding secret.
func serviceTools(cfg Config) []tool.Tool {
	return append(notion.Tools(cfg.Notion), tts.Tools(cfg.TTS)...)
}
