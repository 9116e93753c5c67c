package ctl

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/rpc/admin"
)

func printModelState(w io.Writer, st admin.ModelState) {
	note := func(overridden bool) string {
		if overridden {
			return " (set for this session; reverts on restart)"
		}
		return ""
	}
	running := "running, session " + st.SessionID
	if !st.Running {
		running = "not running: its defaults"
	}
	fmt.Fprintf(w, "agent:         %s (%s)\n", st.AgentID, running)
	fmt.Fprintf(w, "model:         %s%s\n", st.LLM, note(st.LLMOverridden))
	fmt.Fprintf(w, "voice profile: %s%s\n", dash(st.VoiceProfile), note(st.VoiceOverridden))
}

func newModelCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "model", Short: "List models and switch an agent's model for its running session"}
	var asJSON bool
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print results as JSON")
	list := &cobra.Command{Use: "list", Short: "List the named LLM models and TTS providers of config.json", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := g.client()
			defer c.Close()
			out, err := c.ModelList(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, out)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tKIND\tPROVIDER\tMODEL")
			for _, m := range out.Models {
				fmt.Fprintf(tw, "%s\tllm\t%s\t%s\n", m.Name, m.Provider, m.Model)
			}
			for _, t := range out.TTS {
				fmt.Fprintf(tw, "%s\ttts\t%s\t%s\n", t.Name, t.Provider, t.ModelID)
			}
			return tw.Flush()
		}}
	get := &cobra.Command{Use: "get <agent-id>", Short: "Show the agent's current LLM model and voice profile",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := g.client()
			defer c.Close()
			out, err := c.ModelGet(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, out)
			}
			printModelState(g.stdout, out)
			return nil
		}}
	var llm string
	set := &cobra.Command{Use: "set <agent-id> --llm=<name>",
		Short: "Switch the running agent's LLM model until it restarts (hot: its next LLM call uses it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if llm == "" {
				return usageErr(errors.New("--llm is required: name a model of config.json (choirctl model list)"))
			}
			c := g.client()
			defer c.Close()
			out, err := c.ModelSet(cmd.Context(), args[0], llm)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, out)
			}
			printModelState(g.stdout, out)
			return nil
		}}
	set.Flags().StringVar(&llm, "llm", "", "the model, by its name in config.json")
	cmd.AddCommand(list, get, set)
	return cmd
}

func newVoiceCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "voice", Short: "List voice profiles and switch an agent's voice for its running session"}
	var asJSON bool
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print results as JSON")
	list := &cobra.Command{Use: "list", Short: "List the named voice profiles of config.json", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := g.client()
			defer c.Close()
			out, err := c.VoiceList(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, out)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tTTS\tVOICE ID")
			for _, v := range out {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", v.Name, v.TTS, v.VoiceID)
			}
			return tw.Flush()
		}}
	get := &cobra.Command{Use: "get <agent-id>", Short: "Show the agent's current voice profile",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := g.client()
			defer c.Close()
			out, err := c.VoiceGet(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, out)
			}
			printModelState(g.stdout, out)
			return nil
		}}
	set := &cobra.Command{Use: "set <agent-id> <name>", Short: "Switch the running agent's voice profile until it restarts",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := g.client()
			defer c.Close()
			out, err := c.VoiceSet(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, out)
			}
			printModelState(g.stdout, out)
			return nil
		}}
	cmd.AddCommand(list, get, set)
	return cmd
}
