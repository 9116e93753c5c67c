package jobs_test

import (
	"testing"

	"github.com/riverqueue/river"

	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/jobs"
)

// TestMemoryQueues keeps the queues the memory pipeline's jobs go to equal
// to the ones NewClient configures: a job on a queue no client works would
// wait forever.
func TestMemoryQueues(t *testing.T) {
	t.Parallel()
	if memory.QueueEmbed != jobs.QueueEmbed || memory.QueueMemory != jobs.QueueMemory {
		t.Errorf("memory's queues %q and %q, jobs' %q and %q", memory.QueueEmbed, memory.QueueMemory,
			jobs.QueueEmbed, jobs.QueueMemory)
	}
	want := map[string]string{"memory_embed": jobs.QueueEmbed, "memory_chunk_session": jobs.QueueMemory,
		"memory_promote": jobs.QueueMemory}
	type args interface {
		river.JobArgs
		river.JobArgsWithInsertOpts
	}
	for _, args := range []args{memory.EmbedArgs{}, memory.ChunkSessionArgs{}, memory.PromoteArgs{}} {
		if got := args.InsertOpts().Queue; got != want[args.Kind()] {
			t.Errorf("%s jobs go to queue %q, want %q", args.Kind(), got, want[args.Kind()])
		}
	}
}
