package propose

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"strings"

	"github.com/choirhq/choir/agent/proposal"
	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/sql/seam"
)

// The workspace clone of a repo change is ephemeral (spec 20.7): the agent
// clones its repository into its workspace, commits on the proposal
// branch and pushes it; once the proposal is decided and done with
// (applied, not applied, rejected or timed out), choird removes every
// clone in the workspace that has that branch checked out or holds it.
// The branch itself stays in the repository for inspection.

// maxCloneDepth bounds how deep in the workspace a clone is looked for.
const maxCloneDepth = 4

// cleanup removes the workspace clones of a decided repo change. It works
// under os.Root of the workspace: nothing the agent put there (a link to
// a host directory) makes it touch anything outside.
func (p *Proposer) cleanup(ctx context.Context, a approval.Approval) error {
	if a.Type != proposal.TypeRepo {
		return nil
	}
	var r proposal.Repo
	if !jsonObject(a.Payload, &r) || r.Branch == "" {
		return nil
	}
	sess, err := seam.Queries(p.o.Pool).SessionGetByID(ctx, a.SessionID)
	if err != nil {
		return fmt.Errorf("load session %s of proposal %s: %w", a.SessionID, a.ID, err)
	}
	var b struct {
		Workspace string `json:"workspace"`
	}
	json.Unmarshal(sess.ResourceBindings, &b) //nolint:errcheck // no workspace: nothing to clean
	ws := p.o.Control.Snapshot().Config.Workspaces[b.Workspace].Path
	if ws == "" {
		return nil
	}
	root, err := os.OpenRoot(ws)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open workspace %s: %w", ws, err)
	}
	defer root.Close()
	for _, dir := range clonesOf(root, r.Branch) {
		log := p.o.Logger.With(slog.String("approval_id", a.ID.String()), slog.String("agent_id", a.AgentID),
			slog.String("workspace", ws), slog.String("clone", dir), slog.String("branch", r.Branch))
		if dir == "." {
			log.WarnContext(ctx, "the proposal's clone is the workspace itself; not removed")
			continue
		}
		if err := root.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove the workspace clone %s of proposal %s: %w", dir, a.ID, err)
		}
		log.InfoContext(ctx, "proposal's workspace clone removed")
	}
	return nil
}

// clonesOf lists the directories of root, down to maxCloneDepth, that are
// git clones holding branch.
func clonesOf(root *os.Root, branch string) []string {
	var out []string
	fsys := root.FS()
	fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error { //nolint:errcheck // unreadable parts are skipped
		if err != nil || !d.IsDir() {
			return nil
		}
		if d.Name() == ".git" || strings.Count(p, "/") >= maxCloneDepth {
			return fs.SkipDir
		}
		if holdsBranch(root, p, branch) {
			out = append(out, p)
			return fs.SkipDir
		}
		return nil
	})
	return out
}

// holdsBranch reports whether dir is a clone (a real .git directory) with
// branch checked out, or with branch as a local ref.
func holdsBranch(root *os.Root, dir, branch string) bool {
	gitDir := path.Join(dir, ".git")
	if fi, err := root.Lstat(gitDir); err != nil || !fi.IsDir() {
		return false
	}
	ref := "refs/heads/" + branch
	if head, err := root.ReadFile(path.Join(gitDir, "HEAD")); err == nil && strings.TrimSpace(string(head)) == "ref: "+ref {
		return true
	}
	if fi, err := root.Lstat(path.Join(gitDir, ref)); err == nil && fi.Mode().IsRegular() {
		return true
	}
	packed, err := root.ReadFile(path.Join(gitDir, "packed-refs"))
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(packed)) {
		if f := strings.Fields(line); len(f) == 2 && f[1] == ref {
			return true
		}
	}
	return false
}
