package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// maxInputBytes bounds a tool call's input (fs.write content included).
const maxInputBytes = 8 << 20

// refusingLoader refuses every $ref that leaves the schema document: a
// schema is self-contained, and a loader that fetched files or URLs would
// let a manifest read the file system at start-up.
type refusingLoader struct{}

func (refusingLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema reference %s: schemas must be self-contained", url)
}

// CompileSchema compiles a JSON Schema document (draft 2020-12 unless it
// says otherwise) that may not reference anything outside itself. The
// agent's skill package uses it for skill input and output schemas.
func CompileSchema(id string, raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parse schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refusingLoader{})
	url := "urn:choir:schema:" + id
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("add schema: %w", err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("compile schema: %w", err)
	}
	return sch, nil
}

// objectSchemaProps checks that a parameters schema describes an object and
// returns its top-level properties declared with type string.
func objectSchemaProps(raw json.RawMessage) (map[string]bool, error) {
	var top struct {
		Type       any                        `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, errors.New("want a JSON object")
	}
	if top.Type != "object" {
		return nil, errors.New(`want "type": "object" at the top level`)
	}
	props := map[string]bool{}
	for name, p := range top.Properties {
		var ps struct {
			Type any `json:"type"`
		}
		if json.Unmarshal(p, &ps) == nil && ps.Type == "string" {
			props[name] = true
		}
	}
	return props, nil
}

// Problem is one thing wrong with an input.
type Problem struct {
	// Path is the JSON pointer of the offending value ("" for the input
	// itself, "/path" for its path member).
	Path string `json:"path"`
	// Message says what is wrong.
	Message string `json:"message"`
}

// InputError reports an input that does not satisfy its schema. It is
// meant to go back to the model as a structured error; nothing ran.
type InputError struct {
	// Name is the schema's owner, a tool or skill name.
	Name     string    `json:"tool"`
	Problems []Problem `json:"problems"`
}

func (e *InputError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		path := p.Path
		if path == "" {
			path = "/"
		}
		parts[i] = path + ": " + p.Message
	}
	return fmt.Sprintf("invalid input for %s: %s", e.Name, strings.Join(parts, "; "))
}

// ValidateInput checks input against a compiled schema and returns an
// [*InputError] listing every problem, or nil. Besides the schema it
// refuses what JSON parsers disagree about: duplicate keys (a lock could be
// taken on one path and another written), trailing data, and documents over
// 8 MiB or nested deeper than 64 levels.
func ValidateInput(name string, sch *jsonschema.Schema, input json.RawMessage) error {
	if len(input) > maxInputBytes {
		return &InputError{Name: name, Problems: []Problem{{Message: fmt.Sprintf("input is %d bytes, over the limit of %d", len(input), maxInputBytes)}}}
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(input))
	if err != nil {
		return &InputError{Name: name, Problems: []Problem{{Message: "not valid JSON: " + err.Error()}}}
	}
	if p, ok := checkKeys(input); !ok {
		return &InputError{Name: name, Problems: []Problem{p}}
	}
	err = sch.Validate(doc)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return fmt.Errorf("validate input for %s: %w", name, err)
	}
	ie := &InputError{Name: name}
	for _, u := range ve.BasicOutput().Errors {
		if u.Error == nil {
			continue
		}
		ie.Problems = append(ie.Problems, Problem{Path: u.InstanceLocation, Message: u.Error.String()})
	}
	if len(ie.Problems) == 0 {
		ie.Problems = []Problem{{Message: ve.Error()}}
	}
	return ie
}

// maxInputDepth bounds the nesting of an input.
const maxInputDepth = 64

// checkKeys scans a syntactically valid JSON document for duplicate object
// keys (compared after unescaping) and excessive nesting, in one pass over
// the bytes: on the arbiter's path this is cheaper than a token decoder.
func checkKeys(doc []byte) (Problem, bool) {
	type frame struct {
		object bool
		keys   map[string]struct{}
		path   string
	}
	var stack []frame
	expectKey := false
	lastKey := ""
	for i := 0; i < len(doc); i++ {
		switch c := doc[i]; c {
		case '{', '[':
			if len(stack) >= maxInputDepth {
				return Problem{Message: fmt.Sprintf("nested deeper than %d levels", maxInputDepth)}, false
			}
			path := ""
			if n := len(stack); n > 0 {
				path = stack[n-1].path
				if stack[n-1].object {
					path += "/" + lastKey
				} else {
					path += "/*"
				}
			}
			stack = append(stack, frame{object: c == '{', path: path})
			expectKey = c == '{'
		case '}', ']':
			stack = stack[:len(stack)-1]
			expectKey = false
		case ',':
			expectKey = len(stack) > 0 && stack[len(stack)-1].object
		case '"':
			j := i + 1
			escaped := false
			for ; j < len(doc) && doc[j] != '"'; j++ {
				if doc[j] == '\\' {
					escaped = true
					j++
				}
			}
			if expectKey {
				key := string(doc[i+1 : j])
				if escaped {
					_ = json.Unmarshal(doc[i:j+1], &key) // valid JSON: cannot fail
				}
				f := &stack[len(stack)-1]
				if f.keys == nil {
					f.keys = map[string]struct{}{}
				}
				if _, dup := f.keys[key]; dup {
					return Problem{Path: f.path + "/" + key, Message: "duplicate key"}, false
				}
				f.keys[key] = struct{}{}
				lastKey = key
				expectKey = false
			}
			i = j
		}
	}
	return Problem{}, true
}
