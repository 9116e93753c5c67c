package control

// The control layer's side of the jobs: the hooks River's workers call.

// DMAddress locates a DM of config.json: its gateway and chat.
func (d *Control) DMAddress(dm string) (gatewayName, chatID string, ok bool) {
	cfg, _ := d.config()
	return DMAddressIn(cfg, dm)
}

// WorkspaceDirs returns the configured workspaces, name to directory: where
// the delivery worker looks for the files of outbox rows.
func (d *Control) WorkspaceDirs() map[string]string {
	cfg, _ := d.config()
	m := make(map[string]string, len(cfg.Workspaces))
	for name, ws := range cfg.Workspaces {
		m[name] = ws.Path
	}
	return m
}
