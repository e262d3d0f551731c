package dptrain

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/rewrite"
)

// The privacy units (Settings.PrivacyUnit): what one change of the data
// that the guarantee covers is.
const (
	// PrivacyUnitAuto ("" too) is PrivacyUnitUser where the training data
	// names each example's user (data.Users), else PrivacyUnitExample:
	// where the data says that several examples are one person's, a
	// guarantee per example would understate what a person risks.
	PrivacyUnitAuto = "auto"
	// PrivacyUnitExample protects one example (an image, a row).
	PrivacyUnitExample = "example"
	// PrivacyUnitUser protects all of a user's examples at once.
	PrivacyUnitUser = "user"
)

// maxAutoExamplesPerUser caps the examples a sampled user contributes to a
// step where Settings.ExamplesPerUser is 0: the step costs that many rows
// a user, and past a few the mean of a user's gradients gains little.
const maxAutoExamplesPerUser = 16

// userGroups are the training data's users: the examples of each, in the
// dataset's order.
type userGroups struct {
	members [][]int32
}

// resolvePrivacyUnit settles set.PrivacyUnit (PrivacyUnitExample or
// PrivacyUnitUser), and for a user-level run set.Users and
// set.ExamplesPerUser, from the training data. It returns the users for a
// user-level run, nil otherwise. An audit's gradient canaries are units
// of the run's kind: at user level, users of one gradient each.
func resolvePrivacyUnit(set *Settings, train data.Dataset) (*userGroups, error) {
	user, nUsers := data.UsersOf(train)
	unit := set.PrivacyUnit
	switch unit {
	case "", PrivacyUnitAuto:
		unit = PrivacyUnitExample
		if nUsers > 0 {
			unit = PrivacyUnitUser
		}
	case PrivacyUnitExample, PrivacyUnitUser:
	default:
		return nil, fmt.Errorf("--privacy-unit %q: want auto, example or user", set.PrivacyUnit)
	}
	set.PrivacyUnit = unit
	if unit == PrivacyUnitExample {
		set.Users, set.ExamplesPerUser = 0, 0
		return nil, nil
	}
	if nUsers == 0 {
		return nil, errors.New("--privacy-unit user needs training data that names each example's user: a CSV listing with a user column (user, patient_id, subject, …; docs/PRIVACY.md, \"User-level privacy\")")
	}
	if set.AugmentMultiplicity > 1 {
		return nil, fmt.Errorf("--augment-multiplicity %d with user-level privacy: a sampled user's --examples-per-user rows are already several views, each augmented afresh; raise --examples-per-user instead", set.AugmentMultiplicity)
	}
	g := &userGroups{members: make([][]int32, nUsers)}
	for i, u := range user {
		g.members[u] = append(g.members[u], int32(i))
	}
	sizes := make([]int, 0, nUsers)
	for u, m := range g.members {
		if len(m) == 0 {
			return nil, fmt.Errorf("%s: user %d has no examples", set.Data, u)
		}
		sizes = append(sizes, len(m))
	}
	k := set.ExamplesPerUser
	switch {
	case k == 0:
		// The median user's examples: most users' mean gradient is then
		// read whole, each example about once.
		slices.Sort(sizes)
		k = min(max(sizes[len(sizes)/2], 1), maxAutoExamplesPerUser)
	case k < 0 || k > rewrite.MaxMultiplicity:
		return nil, fmt.Errorf("--examples-per-user %d must be between 1 and %d", k, rewrite.MaxMultiplicity)
	}
	set.Users, set.ExamplesPerUser = nUsers, k
	return g, nil
}

// sizes returns the fewest and the most examples a user has.
func (g *userGroups) sizes() (fewest, most int) {
	fewest = math.MaxInt
	for _, m := range g.members {
		fewest, most = min(fewest, len(m)), max(most, len(m))
	}
	return fewest, most
}

// userRows appends k of a user's examples (members) to rows: each of the m
// examples ⌊k/m⌋ times, then k mod m distinct ones drawn uniformly by
// selection sampling (Knuth's algorithm S), so that a user's rows are all
// of its examples as evenly as k allows — where m divides k their mean
// gradient is the mean over all of the user's examples. Only the user's
// own examples and rng decide which rows a user gives: its clipped mean
// changes with no one else's data, which is what the user-level bound
// needs. It allocates nothing.
func userRows(rows []int, members []int32, k int, rng *rand.Rand) []int {
	m := len(members)
	for range k / m {
		for _, i := range members {
			rows = append(rows, int(i))
		}
	}
	need := k % m
	for j, i := range members {
		if need == 0 {
			break
		}
		if rng.IntN(m-j) < need {
			rows = append(rows, int(i))
			need--
		}
	}
	return rows
}

// groupPrivacy returns the guarantee an (ε, δ)-DP mechanism gives a group
// of k units — a user's k examples under a guarantee per example:
// (kε, k·e^((k−1)ε)·δ) (Dwork and Roth 2014, §2.3; by induction over the
// k examples changed one at a time). A δ of 1 or more is no guarantee.
func groupPrivacy(eps, delta float64, k int) (float64, float64) {
	return float64(k) * eps, float64(k) * math.Exp(float64(k-1)*eps) * delta
}

// groupNote says what a guarantee per example gives the user with the
// most examples (most of them) by group privacy alone.
func groupNote(eps, delta float64, most int) string {
	ge, gd := groupPrivacy(eps, delta, most)
	if gd >= 1 {
		return fmt.Sprintf("the user with the most examples (%d) is not protected at all by group privacy (δ = %d·e^(%d·ε)·δ ≥ 1)", most, most, most-1)
	}
	return fmt.Sprintf("the user with the most examples (%d) is protected at ε = %.4g, δ = %.3g by group privacy alone", most, ge, gd)
}
