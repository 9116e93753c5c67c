package propose

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/choirhq/choir/agent/proposal"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/db"
)

// applyConfig writes an approved config change to config.json, then loads
// and applies it through the path choirctl config load and apply take.
// config.json must still be the file the change was checked against; a
// refused apply puts the file back as it was.
func (p *Proposer) applyConfig(ctx context.Context, sc control.Scope, a approval.Approval, prop db.ChoirControlProposal) (outcome, error) {
	c, err := proposal.ParseConfig(a.Payload)
	if err != nil {
		return outcome{}, failed("config", err)
	}
	path := filepath.Join(p.o.Home, config.ConfigFile)
	disk, err := os.ReadFile(path)
	if err != nil {
		return outcome{}, err
	}
	patched, err := proposal.MergePatch(disk, c.Patch)
	if err != nil {
		return outcome{}, failed("config", err)
	}
	sum := sha256.Sum256(disk)
	if hex.EncodeToString(sum[:]) != prop.BaseSha256 {
		// Either a run before a restart wrote it already (the patch then
		// changes nothing), or someone else changed the file.
		if !samePatched(disk, patched) {
			return outcome{}, failed("config", errors.New("config.json changed since the proposal was made; nothing written: propose the change again"))
		}
	}
	if err := writeAtomic(path, patched); err != nil {
		return outcome{}, err
	}
	if _, err := p.o.Control.ConfigLoad(ctx, sc); err != nil {
		os.WriteFile(path, disk, 0o600) //nolint:errcheck // put back what was there
		return outcome{}, failed("config", fmt.Errorf("config load: %w", err))
	}
	res, err := p.o.Control.ConfigApply(ctx, sc)
	if err != nil {
		os.WriteFile(path, disk, 0o600) //nolint:errcheck
		p.o.Control.ConfigLoad(ctx, sc) //nolint:errcheck // stage what runs again
		return outcome{}, failed("config", fmt.Errorf("config apply: %w", err))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Proposal %s (%s): config applied, version %d.", shortID(a), a.AgentID, res.Version)
	for _, ch := range res.Applied {
		switch ch.Effect {
		case control.EffectHotReload:
			fmt.Fprintf(&b, "\n%s: reaches running agents at their next heartbeat.", ch.DisplayPath())
		case control.EffectNextStart:
			fmt.Fprintf(&b, "\n%s: restart required; a running agent keeps the old value until it restarts.", ch.DisplayPath())
		default:
			fmt.Fprintf(&b, "\n%s: %s.", ch.DisplayPath(), ch.Effect)
		}
	}
	return outcome{state: StateApplied, deployment: fmt.Sprintf("config version %d", res.Version), text: b.String()}, nil
}

// samePatched reports whether disk already holds the patch's result: the
// file as a run before a restart wrote it.
func samePatched(disk, patched []byte) bool {
	return strings.TrimSpace(string(disk)) == strings.TrimSpace(string(patched))
}

// writeAtomic replaces a file with data, keeping its mode.
func writeAtomic(path string, data []byte) error {
	mode := os.FileMode(0o600)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config.json.proposal-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
