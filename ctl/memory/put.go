package memory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/rpc/admin"
)

// maxPutBytes bounds what put reads; choird refuses text over its own
// (smaller) limit with a message that names it.
const maxPutBytes = 1 << 20

// memory put and edit write a knowledge document by key as the operator:
// the agent's own kind of versions (insert, update), with actor operator
// in its history. Trailing newlines are dropped, so that a file or an
// editor that ends the text with one does not make a version of its own.

// Put without --expect-version stays last-writer-wins: it states the
// whole text (from a file or a script), not a change to a version its
// caller read, and every version it replaces stays in history. Edit always
// writes "expecting" the version it opened, so a change made meanwhile is
// never overwritten unseen.

type memoryPutOptions struct {
	agent, key, file string
	json             bool
	// expect is --expect-version; -1 when not given.
	expect int
}

func newMemoryPutCommand(env Env) *cobra.Command {
	var opts memoryPutOptions
	cmd := &cobra.Command{
		Use:   "put <agent> <key> [--file F|-]",
		Short: "Write a knowledge document by key, as the operator (a new version when it changes)",
		Long: `Write the text of an agent's knowledge document with key: a new document, or the
next version of the one with that key, recorded with actor operator; nothing is
written when the text is unchanged. The text comes from --file, or from stdin
with --file - (the default): printf %s "The user prefers dark mode" | choirctl memory put assistant user.theme

With --expect-version N the text is written only if the document is still at
version N (0: only if no document has the key yet); if anyone wrote it since,
nothing is written and the error names the version it is at now. Without it,
put replaces whatever is there (the replaced version stays in history).`,
		Args: cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.agent, opts.key = args[0], args[1]
			if len(args) == 3 {
				if args[2] != "-" || opts.file != "-" {
					return env.UsageErr(fmt.Errorf("the text comes from --file or stdin (-), not %q", args[2]))
				}
			}
			text, err := readText(cmd.InOrStdin(), opts.file)
			if err != nil {
				return env.UsageErr(err)
			}
			return runMemoryPut(cmd.Context(), env, opts, text)
		},
	}
	cmd.Flags().StringVar(&opts.file, "file", "-", "read the text from this file (- for stdin)")
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the result as JSON")
	cmd.Flags().IntVar(&opts.expect, "expect-version", -1,
		"write only if the document is at this version (0: only if the key is new)")
	return cmd
}

// readText reads the text of put from file, or stdin for "-".
func readText(stdin io.Reader, file string) (string, error) {
	r, what := stdin, "stdin"
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return "", fmt.Errorf("read the text: %w", err)
		}
		defer f.Close()
		r, what = f, file
	}
	b, err := io.ReadAll(io.LimitReader(r, maxPutBytes+1))
	if err != nil {
		return "", fmt.Errorf("read the text from %s: %w", what, err)
	}
	if len(b) > maxPutBytes {
		return "", fmt.Errorf("the text in %s is over %d bytes", what, maxPutBytes)
	}
	text := strings.TrimRight(string(b), "\r\n")
	if strings.TrimSpace(text) == "" {
		return "", fmt.Errorf("the text in %s is empty; to remove a document use: choirctl memory delete", what)
	}
	return text, nil
}

func runMemoryPut(ctx context.Context, env Env, opts memoryPutOptions, text string) error {
	req := admin.MemoryPutRequest{Key: opts.key, Text: text}
	if opts.expect < -1 {
		return env.UsageErr(fmt.Errorf("--expect-version %d: a version is 1 or more (0: the key must be new)", opts.expect))
	}
	if opts.expect >= 0 {
		req.ExpectVersion = &opts.expect
	}
	c := env.Client()
	defer c.Close()
	r, err := c.MemoryPut(ctx, opts.agent, req)
	if admin.IsConflict(err) && req.ExpectVersion != nil {
		return conflictErr(ctx, c, opts.agent, opts.key, *req.ExpectVersion, func(now string) string {
			return fmt.Sprintf("choirctl memory put %s %s --expect-version %s", opts.agent, opts.key, now)
		})
	}
	if err != nil {
		return env.err(err)
	}
	if opts.json {
		return writeJSON(env.Stdout, r)
	}
	printWrite(env.Stdout, opts.agent, opts.key, r)
	return nil
}

func printWrite(w io.Writer, agent, key string, r admin.MemoryWriteResult) {
	if r.Action == "unchanged" {
		fmt.Fprintf(w, "knowledge document %s of %s is unchanged (version %d): nothing written\n", key, agent, r.Version)
		return
	}
	fmt.Fprintf(w, "%s knowledge document %s of %s: version %d by operator (id %s)\n", r.Action, key, agent, r.Version, r.ID)
}

func newMemoryEditCommand(env Env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "edit <agent> <key>",
		Short: "Edit a knowledge document in $EDITOR, as the operator; a new version only when it changes",
		Long: `Open the current text of an agent's knowledge document with key (or an empty
file for a new one) in $VISUAL or $EDITOR (vi when neither is set). When the
editor exits, a changed text is written as the next version, with actor
operator; an unchanged or empty one writes nothing.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runMemoryEdit(cmd.Context(), env, cmd.InOrStdin(), args[0], args[1], asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func runMemoryEdit(ctx context.Context, env Env, stdin io.Reader, agent, key string, asJSON bool) error {
	c := env.Client()
	defer c.Close()
	var current string
	read := 0 // the version opened; 0 for a new key
	item, err := c.MemoryShow(ctx, agent, key)
	switch {
	case admin.IsNotFound(err):
	case err != nil:
		return env.err(err)
	case item.Knowledge == nil:
		return env.UsageErr(fmt.Errorf("%s is a session or a chunk of %s's memory, not a knowledge document's key", key, agent))
	default:
		current, read = item.Knowledge.Text, item.Knowledge.Version
	}
	edited, err := editText(ctx, env, stdin, current)
	if err != nil {
		return err
	}
	edited = strings.TrimRight(edited, "\r\n")
	switch {
	case edited == strings.TrimRight(current, "\r\n"):
		fmt.Fprintf(env.Stdout, "knowledge document %s of %s is unchanged: nothing written\n", key, agent)
		return nil
	case strings.TrimSpace(edited) == "":
		fmt.Fprintf(env.Stdout, "the text is empty: nothing written (to remove the document: choirctl memory delete %s %s)\n", agent, key)
		return nil
	}
	r, err := c.MemoryPut(ctx, agent, admin.MemoryPutRequest{Key: key, Text: edited, ExpectVersion: &read})
	if admin.IsConflict(err) {
		// The edit is the operator's work: keep it where they can find it.
		kept, kerr := keepText(edited)
		if kerr != nil {
			fmt.Fprintf(env.Stderr, "your edited text could not be kept (%v); here it is:\n%s\n", kerr, edited)
			kept = "FILE"
		}
		fmt.Fprintf(env.Stderr, "your edited text is kept in %s\n", kept)
		return conflictErr(ctx, c, agent, key, read, func(now string) string {
			return fmt.Sprintf("choirctl memory put %s %s --expect-version %s --file %s", agent, key, now, kept)
		})
	}
	if err != nil {
		return env.err(err)
	}
	if asJSON {
		return writeJSON(env.Stdout, r)
	}
	printWrite(env.Stdout, agent, key, r)
	return nil
}

// conflictErr explains a write refused because the document is no longer
// at version read: which version it is at now and who wrote it, that
// nothing was written, and how to go on. putCmd is how to write anyway
// on top of version now ("N" when it is not known).
func conflictErr(ctx context.Context, c *admin.Client, agent, key string, read int,
	putCmd func(now string) string) error {
	now := "a later version"
	next := "N"
	if h, herr := c.MemoryHistory(ctx, agent, key); herr == nil && len(h) > 0 {
		v := h[0]
		now = fmt.Sprintf("version %d (%s by %s at %s)", v.Version, v.Op, v.Actor, v.CreatedAt.Format(time.RFC3339))
		next = strconv.Itoa(v.Version)
		if v.Op == "delete" {
			next = "0"
		}
	}
	was := fmt.Sprintf("version %d", read)
	if read == 0 {
		was = "no document (a new key)"
	}
	return fmt.Errorf("knowledge document %s of %s changed since it was read: you had %s, it is now at %s. "+
		"Nothing was written.\n"+
		"  see the other change:  choirctl memory history %s %s\n"+
		"  start again from it:   choirctl memory edit %s %s\n"+
		"  or write yours on top: %s",
		key, agent, was, now, agent, key, agent, key, putCmd(next))
}

// keepText saves text in a new file of its own and returns its name.
func keepText(text string) (string, error) {
	f, err := os.CreateTemp("", "choir-knowledge-edit-*.md")
	if err != nil {
		return "", err
	}
	_, werr := f.WriteString(text + "\n")
	if err := errors.Join(werr, f.Close()); err != nil {
		return "", err
	}
	return f.Name(), nil
}

// editText runs the operator's editor on text in a private temporary file
// and returns what the file holds when the editor exits. The editor
// variable may hold arguments ("code --wait"), so a shell runs it.
func editText(ctx context.Context, env Env, stdin io.Reader, text string) (string, error) {
	editor := os.Getenv("VISUAL")
	if editor == "" {
		editor = os.Getenv("EDITOR")
	}
	if editor == "" {
		editor = "vi"
	}
	f, err := os.CreateTemp("", "choir-knowledge-*.md")
	if err != nil {
		return "", fmt.Errorf("edit: %w", err)
	}
	defer os.Remove(f.Name())
	_, werr := f.WriteString(text)
	if err := errors.Join(werr, f.Close()); err != nil {
		return "", fmt.Errorf("edit: write %s: %w", f.Name(), err)
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", editor+` "$1"`, "editor", f.Name())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, env.Stdout, env.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("the editor (%s) failed, nothing written: %w", editor, err)
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return "", fmt.Errorf("edit: read %s: %w", f.Name(), err)
	}
	return string(b), nil
}
