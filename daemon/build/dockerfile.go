package build

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strings"
)

// dockerfileInstructions are the instructions the classic builder knows.
var dockerfileInstructions = map[string]bool{
	"ADD": true, "ARG": true, "CMD": true, "COPY": true, "ENTRYPOINT": true, "ENV": true,
	"EXPOSE": true, "FROM": true, "HEALTHCHECK": true, "LABEL": true, "MAINTAINER": true,
	"ONBUILD": true, "RUN": true, "SHELL": true, "STOPSIGNAL": true, "USER": true,
	"VOLUME": true, "WORKDIR": true,
}

var directiveRE = regexp.MustCompile(`^#\s*([a-zA-Z][a-zA-Z0-9]*)\s*=\s*(.*?)\s*$`)

// DockerfileProblem is one line of a Dockerfile that the builder would
// refuse.
type DockerfileProblem struct {
	// Line is the 1-based line the instruction starts on.
	Line    int
	Message string
}

func (p DockerfileProblem) String() string { return fmt.Sprintf("line %d: %s", p.Line, p.Message) }

// CheckDockerfile parses a Dockerfile as the classic builder reads it
// (parser directives, comments, line continuations) and reports every
// instruction it would refuse: an unknown instruction, one without
// arguments, anything but ARG before the first FROM, no FROM at all, a
// `# syntax=` directive (it makes BuildKit pull a frontend image, and no
// registry is reachable).
func CheckDockerfile(data []byte) []DockerfileProblem { return checkDockerfile(data, nil) }

// CheckAgentDockerfile checks an agent repository's Dockerfile as
// [CheckDockerfile] does, and also refuses every instruction that reaches
// past the build context (see reach): the agent writes this file, and the
// engine runs on the host.
func CheckAgentDockerfile(data []byte) []DockerfileProblem {
	return checkDockerfile(data, &reach{stages: map[string]bool{}})
}

func checkDockerfile(data []byte, rc *reach) []DockerfileProblem {
	var out []DockerfileProblem
	bad := func(line int, format string, args ...any) {
		out = append(out, DockerfileProblem{Line: line, Message: fmt.Sprintf(format, args...)})
	}
	escape := byte('\\')
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	n, start, directives := 0, 0, true
	var cont strings.Builder
	sawFrom := false
	instruction := func(line int, text string) {
		word, args, _ := strings.Cut(strings.TrimSpace(text), " ")
		if i := strings.IndexByte(word, '\t'); i >= 0 {
			word, args = word[:i], word[i:]
		}
		kw := strings.ToUpper(word)
		switch {
		case !dockerfileInstructions[kw]:
			bad(line, "unknown instruction %q", word)
			return
		case strings.TrimSpace(args) == "":
			bad(line, "%s needs arguments", kw)
		}
		if rc != nil {
			if msg := rc.check(kw, strings.TrimSpace(args)); msg != "" {
				bad(line, "%s", msg)
			}
		}
		if kw == "FROM" {
			sawFrom = true
		} else if !sawFrom && kw != "ARG" {
			bad(line, "%s before the first FROM: only ARG may come before FROM", kw)
		}
	}
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), " \t\r")
		trimmed := strings.TrimSpace(line)
		if directives {
			if m := directiveRE.FindStringSubmatch(trimmed); m != nil && cont.Len() == 0 {
				switch strings.ToLower(m[1]) {
				case "escape":
					if m[2] != "\\" && m[2] != "`" {
						bad(n, "escape directive %q: want \\ or `", m[2])
					} else {
						escape = m[2][0]
					}
				case "syntax":
					bad(n, "a syntax directive makes the builder pull a frontend image, and images are never pulled: remove it")
				}
				continue
			}
			directives = false
		}
		if cont.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cont.Len() > 0 && strings.HasPrefix(trimmed, "#") {
			continue // comments inside a continued instruction are dropped
		}
		if cont.Len() == 0 {
			start = n
		}
		if len(line) > 0 && line[len(line)-1] == escape {
			cont.WriteString(line[:len(line)-1] + " ")
			continue
		}
		cont.WriteString(line)
		instruction(start, cont.String())
		cont.Reset()
	}
	if err := sc.Err(); err != nil {
		bad(n, "read: %v", err)
	}
	if strings.TrimSpace(cont.String()) != "" {
		instruction(start, cont.String())
	}
	if !sawFrom {
		bad(max(n, 1), "no FROM instruction")
	}
	return out
}
