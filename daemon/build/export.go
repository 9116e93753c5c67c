package build

import (
	"context"
	"errors"
	"fmt"

	"github.com/choirhq/choir/daemon/build/gittree"
)

// LinkError is a symbolic link in a repository that leaves it, refused
// before anything is staged. Repo is "global" or "agent"; File is the
// link's path in the repository.
type LinkError struct {
	Repo   string
	File   string
	Target string
}

func (e *LinkError) Error() string {
	return fmt.Sprintf("%s repo %s: a symbolic link to %s, outside the repository: builds read only what git holds; commit the file itself instead of a link",
		e.Repo, e.File, e.Target)
}

// exportCommit writes the tree of commit from the clone's object database
// into dst (see gittree): everything the pipeline stages, validates and
// sends to the engine is read from such trees. Links that leave the
// repository are *LinkError values joined in the error, which wraps
// ErrInvalidRepo; repo is "global" or "agent".
func (b *Builder) exportCommit(ctx context.Context, repo, clone, commit, dst string) error {
	err := gittree.Export(ctx, b.gitBin, clone, commit, dst)
	if err == nil {
		return nil
	}
	var links []error
	for _, l := range gittree.LinkErrors(err) {
		links = append(links, &LinkError{Repo: repo, File: l.File, Target: l.Target})
	}
	switch {
	case len(links) > 0:
		return fmt.Errorf("%w: %w", ErrInvalidRepo, errors.Join(links...))
	case errors.Is(err, gittree.ErrInvalid):
		return fmt.Errorf("%w: %s repo commit %s: %w", ErrInvalidRepo, repo, short(commit), err)
	}
	return fmt.Errorf("%s repo: %w", repo, err)
}

// linkErrors are the *LinkError values inside err.
func linkErrors(err error) []*LinkError {
	var out []*LinkError
	for err != nil {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				out = append(out, linkErrors(e)...)
			}
			return out
		}
		if le, ok := err.(*LinkError); ok {
			return append(out, le)
		}
		err = errors.Unwrap(err)
	}
	return out
}
