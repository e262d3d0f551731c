package data

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash"
	"slices"
	"strconv"
)

// Users is implemented by a Dataset whose samples name the user they
// belong to: the individual a user-level guarantee protects (all of a
// patient's scans, say). NumUsers is 0 where the samples name none.
type Users interface {
	// NumUsers returns the number of distinct users (0: none named).
	NumUsers() int
	// UserOf returns the user of sample i, in [0, NumUsers()).
	UserOf(i int) int
	// UserName returns user u's name as the data gives it.
	UserName(u int) string
}

// UsersOf returns the user of every sample of d and the users' count, or
// (nil, 0) where d names none. A sampler that protects users rather than
// samples draws users and takes all of their samples; the slice is the
// caller's.
func UsersOf(d interface{ Len() int }) (user []int32, n int) {
	u, ok := d.(Users)
	if !ok {
		return nil, 0
	}
	if n = u.NumUsers(); n <= 0 {
		return nil, 0
	}
	user = make([]int32, d.Len())
	for i := range user {
		user[i] = int32(u.UserOf(i))
	}
	return user, n
}

var (
	_ Users = (*Images)(nil)
	_ Users = (*View)(nil)
	_ Users = (*Arrays)(nil)
)

// numberUsers numbers the users named by each sample (name[i] is sample
// i's) densely in sorted order of their names, so that the numbering
// depends on the data alone: user[i] is sample i's number, names the
// users by number.
func numberUsers(name []string) (user []int32, names []string) {
	return numberDensely(name)
}

// numberDensely numbers the distinct values of vals densely in increasing
// order: each value's number, and the distinct values by number.
func numberDensely[T cmp.Ordered](vals []T) (number []int32, distinct []T) {
	index := make(map[T]int32, len(vals)/2+1)
	for _, v := range vals {
		if _, ok := index[v]; !ok {
			index[v] = 0
			distinct = append(distinct, v)
		}
	}
	slices.Sort(distinct)
	for u, v := range distinct {
		index[v] = int32(u)
	}
	number = make([]int32, len(vals))
	for i, v := range vals {
		number[i] = index[v]
	}
	return number, distinct
}

// heldOutUsers says which of the users named (each name once or more) a
// holdout of fraction f holds out: holdoutKeys over their sorted distinct
// names, so that all of a user's samples land on one side.
func heldOutUsers(names []string, f float64) map[string]bool {
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	held := holdoutKeys(names, f)
	out := make(map[string]bool, len(names))
	for k, name := range names {
		out[name] = held[k]
	}
	return out
}

// hashUsers writes each sample's user name (user[i] indexes names) to a
// fingerprint's hash, each prefixed by its length, after a tag and the
// users' count; nothing where no users are named.
func hashUsers(h hash.Hash, user []int32, names []string) {
	if user == nil {
		return
	}
	var b [8]byte
	put := func(v int64) {
		binary.LittleEndian.PutUint64(b[:], uint64(v))
		h.Write(b[:])
	}
	h.Write([]byte("users"))
	put(int64(len(names)))
	for _, u := range user {
		put(int64(len(names[u])))
		h.Write([]byte(names[u]))
	}
}

// numberIntUsers numbers integer user ids as numberUsers numbers names:
// densely, in increasing numeric order, each named by its decimal string.
func numberIntUsers(id []int64) (user []int32, names []string) {
	user, ids := numberDensely(id)
	names = make([]string, len(ids))
	for u, v := range ids {
		names[u] = strconv.FormatInt(v, 10)
	}
	return user, names
}

// NumUsers returns the number of distinct users the samples belong to:
// the users of a CSV listing's user column (see loadCSV), of a folder's
// users= expression (Spec.Users) or named with WithUsers; 0 where none
// are named.
func (m *Images) NumUsers() int { return len(m.userNames) }

// UserOf returns the user of sample i, in [0, NumUsers()); -1 where the
// samples name no users.
func (m *Images) UserOf(i int) int {
	if m.users == nil {
		return -1
	}
	return int(m.users[i])
}

// UserName returns user u's name as the data gives it. Users are numbered
// in sorted order of their names.
func (m *Images) UserName(u int) string { return m.userNames[u] }

// WithUsers returns m with sample i belonging to the user named user[i]
// (one non-empty name a sample), numbered in sorted order of the names:
// for callers that build Images with NewImages and know whose each sample
// is. The pixels, labels and sources are shared with m.
func (m *Images) WithUsers(user []string) (*Images, error) {
	if len(user) != m.Len() {
		return nil, fmt.Errorf("data: %d user names for %d samples: want one a sample", len(user), m.Len())
	}
	for i, s := range user {
		if s == "" {
			return nil, fmt.Errorf("data: sample %d has an empty user name", i)
		}
	}
	out := m.derive()
	out.users, out.userNames = numberUsers(user)
	return out, nil
}

// derive returns a copy of m's samples, labels, classes, fit, sources and
// users (shared, not copied) with its own fingerprint, for the methods
// that build an Images from another.
func (m *Images) derive() *Images {
	return &Images{
		spec: m.spec, classes: m.classes, labels: m.labels, channels: m.channels,
		h: m.h, w: m.w, pix: m.pix, samples: m.samples, sizes: m.sizes,
		fit: m.fit, sources: m.sources, sourcePaths: m.sourcePaths, seriesNames: m.seriesNames,
		narrow16: m.narrow16, narrow16First: m.narrow16First,
		users: m.users, userNames: m.userNames, multiLabel: m.multiLabel, uncertain: m.uncertain,
		mapped: m.mapped,
	}
}

// PixelsOnDisk is the source dataset's PixelsOnDisk.
func (v *View) PixelsOnDisk() (int64, string) { return v.src.PixelsOnDisk() }

// UncertainTargets is the source dataset's UncertainTargets.
func (v *View) UncertainTargets() []float64 { return v.src.UncertainTargets() }

// PixelsKept is the source dataset's PixelsKept.
func (v *View) PixelsKept() (string, bool) { return v.src.PixelsKept() }

// LeftOut is the source dataset's LeftOut.
func (v *View) LeftOut() []string { return v.src.LeftOut() }

// NumUsers is the source dataset's NumUsers.
func (v *View) NumUsers() int { return v.src.NumUsers() }

// UserOf is the source dataset's UserOf.
func (v *View) UserOf(i int) int { return v.src.UserOf(i) }

// UserName is the source dataset's UserName.
func (v *View) UserName(u int) string { return v.src.UserName(u) }

// NumUsers returns the number of distinct users the samples belong to
// (the optional users array, see LoadArrays); 0 where none are named.
func (a *Arrays) NumUsers() int { return len(a.userNames) }

// UserOf returns the user of sample i, in [0, NumUsers()); -1 where the
// samples name no users.
func (a *Arrays) UserOf(i int) int {
	if a.users == nil {
		return -1
	}
	return int(a.users[i])
}

// UserName returns user u's name: the decimal id the users array gives
// it. Users are numbered in increasing order of their ids.
func (a *Arrays) UserName(u int) string { return a.userNames[u] }
