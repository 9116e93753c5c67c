package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/choirhq/choir/config"
)

// TestValidateWorkspacePaths: a workspace is given to its agent
// recursively, so none may be, hold or sit inside what the host needs.
// A config change proposed by the agent is validated the same way.
func TestValidateWorkspacePaths(t *testing.T) {
	t.Parallel()
	home := "/srv/op/.choir.d"
	userHome, _ := os.UserHomeDir()
	tests := []struct {
		name  string
		paths map[string]string
		want  []string // nil: valid
	}{
		{"Root", map[string]string{"w": "/"}, []string{`$.workspaces.w.path: / is the root directory*`}},
		{"Etc", map[string]string{"w": "/etc"}, []string{`$.workspaces.w.path: /etc is, holds or sits inside /etc, a system directory*`}},
		{"InsideUsr", map[string]string{"w": "/usr/local/bin"}, []string{`$.workspaces.w.path: /usr/local/bin is, holds or sits inside /usr*`}},
		{"Var", map[string]string{"w": "/var"}, []string{`$.workspaces.w.path: /var is or holds /var/lib*`}},
		{"VarLib", map[string]string{"w": "/var/lib/"}, []string{`$.workspaces.w.path: /var/lib is or holds /var/lib*`}},
		{"AServicesState", map[string]string{"w": "/var/lib/postgresql"}, []string{`$.workspaces.w.path: /var/lib/postgresql is a service's state directory*`}},
		{"ChoirdsHome", map[string]string{"w": home}, []string{`$.workspaces.w.path: /srv/op/.choir.d is, holds or sits inside /srv/op/.choir.d, choird's home*`}},
		{"HoldsChoirdsHome", map[string]string{"w": "/srv/op"}, []string{`$.workspaces.w.path: /srv/op is, holds or sits inside /srv/op/.choir.d*`}},
		{"InsideChoirdsClones", map[string]string{"w": home + "/repos/agents/a"}, []string{`$.workspaces.w.path: /srv/op/.choir.d/repos/agents/a is, holds or sits inside /srv/op/.choir.d, choird's home*`}},
		{"TheWorkspacesDirItself", map[string]string{"w": home + "/workspaces"}, []string{`$.workspaces.w.path: /srv/op/.choir.d/workspaces is, holds or sits inside /srv/op/.choir.d, choird's home*`}},
		{"UsersHome", map[string]string{"w": userHome}, []string{`$.workspaces.w.path: ` + userHome + ` is or holds the home directory*`}},
		{"InsideAnotherWorkspace", map[string]string{"a": "/srv/ws", "b": "/srv/ws/b"},
			[]string{`$.workspaces.b.path: /srv/ws/b sits inside workspace "a" (/srv/ws)*`}},
		{"Fine", map[string]string{"a": "/srv/ws/a", "b": "/srv/ws/b", "c": home + "/workspaces/main", "d": "/var/lib/choir/workspaces/d",
			"e": filepath.Join(userHome, "ws")}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, s := specConfig(t), specSecrets()
			c.Workspaces = map[string]config.Workspace{}
			for name, p := range tt.paths {
				c.Workspaces[name] = config.Workspace{Path: p}
			}
			for id, a := range c.Agents {
				a.Defaults.Workspace = "none"
				c.Agents[id] = a
			}
			err := c.ValidateAt(home, s)
			var got []string
			for _, p := range problems(t, err) {
				if len(p) > len("$.workspaces.") && p[:len("$.workspaces.")] == "$.workspaces." {
					got = append(got, p)
				}
			}
			if tt.want == nil {
				if len(got) > 0 {
					t.Fatalf("workspace problems: %q", got)
				}
				return
			}
			checkProblems(t, got, tt.want)
		})
	}
}
