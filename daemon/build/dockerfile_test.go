package build_test

import (
	"slices"
	"testing"

	"github.com/choirhq/choir/daemon/build"
)

func TestCheckDockerfile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"BaseWithArgAndContinuation", "# a comment\nARG CHOIR_OS_IMAGE=scratch\nFROM ${CHOIR_OS_IMAGE}\nRUN echo a \\\n  # dropped\n  && echo b\n", nil},
		{"LowercaseAndTabs", "from\tscratch\ncopy a /a\n", nil},
		{"EscapeDirective", "# escape=`\nFROM scratch\nRUN echo a `\n  b\n", nil},
		{"Empty", "", []string{"line 1: no FROM instruction"}},
		{"UnknownInstruction", "FROM scratch\nCOPYY a b\n", []string{`line 2: unknown instruction "COPYY"`}},
		{"InstructionBeforeFrom", "RUN true\nFROM scratch\n", []string{"line 1: RUN before the first FROM: only ARG may come before FROM"}},
		{"NoArguments", "FROM scratch\nRUN\n", []string{"line 2: RUN needs arguments"}},
		{"SyntaxDirectivePulls", "# syntax=docker/dockerfile:1\nFROM scratch\n", []string{"line 1: a syntax directive makes the builder pull a frontend image, and images are never pulled: remove it"}},
		{"ContinuedInstructionReportsItsFirstLine", "FROM scratch\nBOGUS a \\\n b\nRUN \\\n\n", []string{`line 2: unknown instruction "BOGUS"`, "line 4: RUN needs arguments"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, p := range build.CheckDockerfile([]byte(tt.in)) {
				got = append(got, p.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("CheckDockerfile =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestCheckAgentDockerfileAllows(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"ARG CHOIR_BASE_IMAGE\nFROM ${CHOIR_BASE_IMAGE}\nRUN echo a\nCOPY tools/x /choir/tools/agent/x\nADD --chown=1:1 a.tar /opt/\n",
		"ARG CHOIR_BASE_IMAGE\nFROM $CHOIR_BASE_IMAGE AS build\nRUN make\nFROM scratch\nCOPY --from=build /out /out\nCOPY --from=0 /a /a\n",
		`ARG CHOIR_BASE_IMAGE` + "\nFROM ${CHOIR_BASE_IMAGE}\nCOPY [\"a b\", \"/c\"]\n",
	} {
		if ps := build.CheckAgentDockerfile([]byte(in)); len(ps) > 0 {
			t.Errorf("CheckAgentDockerfile(%q) = %v", in, ps)
		}
	}
}
