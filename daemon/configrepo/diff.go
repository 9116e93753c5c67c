package configrepo

import (
	"maps"
	"slices"

	"github.com/choirhq/choir/config/configdiff"
)

// Diff returns the changes from running to staged repositories: for each
// repository, its commit (the line "global repo: abc1234 -> def5678"),
// then each file a build bakes that was added, removed or changed, sorted
// by path. Every change is restart-required: it reaches an agent through
// a new image, and the hint names the command that builds and redeploys
// it. A nil running state is an empty one.
func Diff(running, staged *State) []configdiff.Change {
	if staged == nil {
		return nil
	}
	if running == nil {
		running = &State{}
	}
	names := slices.Collect(maps.Keys(staged.Repos))
	for n := range running.Repos {
		if _, ok := staged.Repos[n]; !ok {
			names = append(names, n)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		switch {
		case a == b:
			return 0
		case a == GlobalRepo:
			return -1
		case b == GlobalRepo:
			return 1
		case a < b:
			return -1
		}
		return 1
	})
	var out []configdiff.Change
	for _, name := range names {
		a, ina := running.Repos[name]
		b, inb := staged.Repos[name]
		change := func(op, file, old, new string) {
			out = append(out, configdiff.Change{Op: op, Repo: name, File: file, Old: old, New: new,
				Effect: EffectRestartRequired, Hint: hint(name)})
		}
		switch {
		case !ina:
			change(configdiff.OpAdd, "", "", b.Commit)
		case !inb:
			change(configdiff.OpRemove, "", a.Commit, "")
			continue
		case a.Commit != b.Commit:
			change(configdiff.OpChange, "", a.Commit, b.Commit)
		}
		files := slices.Collect(maps.Keys(b.Files))
		for f := range a.Files {
			if _, ok := b.Files[f]; !ok {
				files = append(files, f)
			}
		}
		slices.Sort(files)
		for _, f := range files {
			ha, fa := a.Files[f]
			hb, fb := b.Files[f]
			switch {
			case !fa:
				change(configdiff.OpAdd, f, "", "")
			case !fb:
				change(configdiff.OpRemove, f, "", "")
			case ha != hb:
				change(configdiff.OpChange, f, "", "")
			}
		}
	}
	return out
}

// hint is the command that brings a repository's change to the agents:
// every agent for the global repository, the one agent for its own.
func hint(name string) string {
	if name == GlobalRepo {
		return "choirctl agent update-all"
	}
	return "choirctl agent update " + name
}
