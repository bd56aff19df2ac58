package dashboard

import (
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/repository"
)

// TestSkipReasonsSingular: under a SINGULAR condition an ACTIVE task of the identifier
// holds a READY one back wherever it is (migration 000043), a READY one only when older.
func TestSkipReasonsSingular(t *testing.T) {
	task := repository.Task{Topic: "mail", Sequence: 10, State: repository.Ready}
	for _, tc := range []struct {
		other repository.Excerpt
		want  string // "" for no reason
	}{
		{repository.Excerpt{Task: repository.Task{Topic: "mail", Sequence: 12, State: repository.Active}}, "waits for task #12 of its identifier (ACTIVE) to finish"},
		{repository.Excerpt{Task: repository.Task{Topic: "mail", Sequence: 8, State: repository.Active}}, "waits for task #8 of its identifier (ACTIVE) to finish"},
		{repository.Excerpt{Task: repository.Task{Topic: "mail", Sequence: 8, State: repository.Ready}}, "waits for the older task #8 of its identifier (READY)"},
		{repository.Excerpt{Task: repository.Task{Topic: "mail", Sequence: 12, State: repository.Ready}}, ""},
	} {
		got := skipReasons(task, false, []repository.Excerpt{tc.other}, time.Now())
		switch {
		case tc.want == "" && len(got) != 0:
			t.Errorf("%s #%d: reasons %v, want none", tc.other.State, tc.other.Sequence, got)
		case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0].Text, tc.want)):
			t.Errorf("%s #%d: reasons %v, want one saying %q", tc.other.State, tc.other.Sequence, got, tc.want)
		}
	}
}
