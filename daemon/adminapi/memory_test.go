package adminapi

import (
	"reflect"
	"testing"

	"github.com/choirhq/choir/daemon/embed"
	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/rpc/admin"
)

// TestAdminMemoryTypesHaveTheStoresJSON holds rpc/admin's memory types to
// the JSON of the store's types that choird's handlers return: the same
// fields, names, options, order and types, so that choirctl decodes every
// answer strictly and prints it as the store wrote it.
func TestAdminMemoryTypesHaveTheStoresJSON(t *testing.T) {
	t.Parallel()
	for _, p := range []struct{ store, wire any }{
		{memory.QueryResult{}, admin.MemoryQueryResult{}},
		{memoryItem{}, admin.MemoryItem{}},
		{memory.Session{}, admin.MemorySession{}},
		{memory.KnowledgeVersion{}, admin.MemoryKnowledgeVersion{}},
		{memory.UpsertResult{}, admin.MemoryWriteResult{}},
		{memory.ReembedResult{}, admin.MemoryReembedResult{}},
		{memory.Status{}, admin.MemoryReport{}},
		{embed.Status{}, admin.EmbeddingStatus{}},
	} {
		a, b := reflect.TypeOf(p.store), reflect.TypeOf(p.wire)
		if err := sameJSON(a, b, a.String()); err != "" {
			t.Errorf("%s and %s differ: %s", a, b, err)
		}
	}
}

// sameJSON compares the JSON encodings of two types field by field.
func sameJSON(a, b reflect.Type, path string) string {
	if a == b {
		return ""
	}
	if a.Kind() != b.Kind() {
		return path + ": " + a.String() + " vs " + b.String()
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return sameJSON(a.Elem(), b.Elem(), path+"[]")
	case reflect.Map:
		if e := sameJSON(a.Key(), b.Key(), path+" key"); e != "" {
			return e
		}
		return sameJSON(a.Elem(), b.Elem(), path+" value")
	case reflect.Struct:
		if a.NumField() != b.NumField() {
			return path + ": " + a.String() + " and " + b.String() + " have different numbers of fields"
		}
		for i := range a.NumField() {
			fa, fb := a.Field(i), b.Field(i)
			p := path + "." + fa.Name
			switch {
			case fa.Anonymous != fb.Anonymous, !fa.Anonymous && fa.Name != fb.Name:
				return p + ": field " + fb.Name + " in its place"
			case fa.Tag.Get("json") != fb.Tag.Get("json"):
				return p + ": tag " + fa.Tag.Get("json") + " vs " + fb.Tag.Get("json")
			}
			if e := sameJSON(fa.Type, fb.Type, p); e != "" {
				return e
			}
		}
		return ""
	case reflect.Interface:
		return path + ": interface types"
	}
	if a.PkgPath() != "" || b.PkgPath() != "" {
		// Named scalars may have methods that change their JSON.
		return path + ": " + a.String() + " vs " + b.String()
	}
	return ""
}
