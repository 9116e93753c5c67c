// Package manifest reads the files of an agent's repository that declare
// tools, and checks them without running anything: the external tools'
// manifests (<stem>.json next to its executable, in the global or the
// agent's tool directory; [LoadTools]) and mcp.json, the agent's MCP
// servers ([LoadMCP]). The agent and choird share it: the agent binds what
// it loads to the executors of packages external and mcp; choird's image
// build loads the same files to refuse a repository whose tools the agent
// would not load, without linking any tool's code.
package manifest
