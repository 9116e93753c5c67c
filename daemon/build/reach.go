package build

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// reach refuses the instructions of an agent's Dockerfile that make the
// engine read something outside the build context, which is the agent
// repository's tree at the built commit: a remote source (ADD <url>, ADD
// of a git repository), another image (FROM or COPY --from naming
// anything but the base image or an earlier stage: another agent's image
// holds its identity and tools), a build mount of the host or a secret
// (RUN --mount, --network, --security), a source named by a variable
// (its value is not in the file), and ONBUILD triggers, which would run
// in choird's own final stage. The engine builds with its own rights on
// the host; the agent wrote this file.
type reach struct {
	stages map[string]bool // earlier stages' names and indexes
	n      int             // stages so far
}

// check returns why an instruction is refused, or "".
func (r *reach) check(kw, args string) string {
	flags, rest := splitFlags(args)
	switch kw {
	case "ONBUILD":
		return "ONBUILD is not allowed in an agent's Dockerfile: its trigger would run in choird's final stage"
	case "FROM":
		if len(flags) > 0 {
			return fmt.Sprintf("FROM %s: no flags are allowed in an agent's Dockerfile", flags[0])
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return ""
		}
		defer func() {
			r.stages[strconv.Itoa(r.n)] = true
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				r.stages[strings.ToLower(f[2])] = true
			}
			r.n++
		}()
		img := f[0]
		if img == "${"+ArgBaseImage+"}" || img == "$"+ArgBaseImage || img == "scratch" || r.stages[strings.ToLower(img)] {
			return ""
		}
		return fmt.Sprintf("FROM %s: an agent's Dockerfile builds FROM ${%s} (or scratch, or an earlier stage), never another image", img, ArgBaseImage)
	case "RUN":
		if len(flags) > 0 {
			return fmt.Sprintf("RUN %s: build mounts and RUN flags reach outside the build context; not allowed in an agent's Dockerfile", flags[0])
		}
	case "ADD", "COPY":
		for _, fl := range flags {
			name, val, _ := strings.Cut(strings.TrimPrefix(fl, "--"), "=")
			switch strings.ToLower(name) {
			case "chown", "chmod":
			case "from":
				if kw == "COPY" && r.stages[strings.ToLower(val)] {
					continue
				}
				return fmt.Sprintf("%s --from=%s: copies from another image or context; only an earlier stage of this Dockerfile may be named", kw, val)
			default:
				return fmt.Sprintf("%s %s: flag not allowed in an agent's Dockerfile", kw, fl)
			}
		}
		srcs := sources(rest)
		for _, src := range srcs {
			switch {
			case strings.Contains(src, "$"):
				return fmt.Sprintf("%s %s: a source named by a variable is not allowed in an agent's Dockerfile; name the file", kw, src)
			case kw == "ADD" && (strings.Contains(src, "://") || strings.HasPrefix(src, "git@") || strings.HasSuffix(src, ".git")):
				return fmt.Sprintf("ADD %s: a remote source makes the engine fetch it from the host; commit the file to the repository instead", src)
			}
		}
	}
	return ""
}

// splitFlags splits leading --flags from an instruction's arguments.
func splitFlags(args string) (flags []string, rest string) {
	rest = strings.TrimSpace(args)
	for strings.HasPrefix(rest, "--") {
		f, r, _ := strings.Cut(rest, " ")
		if i := strings.IndexByte(f, '\t'); i >= 0 {
			f, r = f[:i], f[i:]+" "+r
		}
		flags = append(flags, f)
		rest = strings.TrimSpace(r)
	}
	return flags, rest
}

// sources are the sources of an ADD or COPY: every argument but the last,
// in the shell or the JSON form.
func sources(rest string) []string {
	var args []string
	if !strings.HasPrefix(rest, "[") || json.Unmarshal([]byte(rest), &args) != nil {
		args = strings.Fields(rest)
	}
	if len(args) < 2 {
		return args
	}
	return args[:len(args)-1]
}
