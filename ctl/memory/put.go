package memory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

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

type memoryPutOptions struct {
	agent, key, file string
	json             bool
}

func newMemoryPutCommand(env Env) *cobra.Command {
	var opts memoryPutOptions
	cmd := &cobra.Command{
		Use:   "put <agent> <key> [--file F|-]",
		Short: "Write a knowledge document by key, as the operator (a new version when it changes)",
		Long: `Write the text of an agent's knowledge document with key: a new document, or the
next version of the one with that key, recorded with actor operator; nothing is
written when the text is unchanged. The text comes from --file, or from stdin
with --file - (the default): printf %s "The user prefers dark mode" | choirctl memory put assistant user.theme`,
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
	c := env.Client()
	defer c.Close()
	r, err := c.MemoryPut(ctx, opts.agent, admin.MemoryPutRequest{Key: opts.key, Text: text})
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
	item, err := c.MemoryShow(ctx, agent, key)
	switch {
	case admin.IsNotFound(err):
	case err != nil:
		return env.err(err)
	case item.Knowledge == nil:
		return env.UsageErr(fmt.Errorf("%s is a session or a chunk of %s's memory, not a knowledge document's key", key, agent))
	default:
		current = item.Knowledge.Text
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
	r, err := c.MemoryPut(ctx, agent, admin.MemoryPutRequest{Key: key, Text: edited})
	if err != nil {
		return env.err(err)
	}
	if asJSON {
		return writeJSON(env.Stdout, r)
	}
	printWrite(env.Stdout, agent, key, r)
	return nil
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
