package sql

// SetRequiredExtension makes m require another extension than pgvector, so
// a test can see how a server without it is refused.
func SetRequiredExtension(m *Migrator, name string) { m.extension = name }
