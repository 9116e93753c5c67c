package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// worseBeyond is the change past which a figure is marked worse than the
// compared revision: 5%, the bar the issues set for a change's cost.
const worseBeyond = 0.05

// compared is a figure as the -compare revision measured it, and the
// change from there to this tree.
type compared struct {
	Values []float64 `json:"values"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	// Change is this tree's median over the revision's, minus one:
	// +0.10 is 10% more (worse for a latency, better for a throughput).
	Change float64 `json:"change"`
	// Worse says the change is past worseBeyond in the bad direction.
	Worse bool   `json:"worse"`
	Error string `json:"error,omitempty"`
}

// compareWith records was, the same figure measured on the -compare
// revision, beside r.
func (r *result) compareWith(was result) {
	c := &compared{Values: was.Values, Median: was.Median, Min: was.Min, Max: was.Max, Error: was.Error}
	r.Compare = c
	if c.Error != "" || r.Error != "" || c.Median == 0 {
		return
	}
	c.Change = r.Median/c.Median - 1
	// 1e-9: exactly 5% (95 against 100) is not past it, float rounding
	// notwithstanding.
	if r.Higher {
		c.Worse = c.Change < -worseBeyond-1e-9
	} else {
		c.Worse = c.Change > worseBeyond+1e-9
	}
}

// checkout makes a detached worktree of rev under dir and returns its
// path, rev's short hash, and what removes it.
func checkout(ctx context.Context, root, rev, dir string) (string, string, func(), error) {
	out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--verify", "--short", rev+"^{commit}").CombinedOutput()
	if err != nil {
		return "", "", nil, fmt.Errorf("-compare %s: not a commit of this repository: %s", rev, strings.TrimSpace(string(out)))
	}
	short := strings.TrimSpace(string(out))
	tree := filepath.Join(dir, "tree-"+short)
	if out, err := exec.CommandContext(ctx, "git", "-C", root, "worktree", "add", "--detach", tree, short).CombinedOutput(); err != nil {
		return "", "", nil, fmt.Errorf("-compare %s: git worktree add: %v: %s", rev, err, strings.TrimSpace(string(out)))
	}
	cleanup := func() {
		_ = exec.Command("git", "-C", root, "worktree", "remove", "--force", tree).Run()
	}
	return tree, short, cleanup, nil
}
