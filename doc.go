// Package choir is the module's root. It holds no code of its own: its
// tests hold the whole tree to the layout that ../shared/DESIGN.md
// promises (a doc comment on every package, packages and functions of a
// readable size, and dependencies that point one way).
package choir
