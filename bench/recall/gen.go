package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// turn is one chunk of a generated conversation: a user message and the
// assistant's reply, in one session.
type turn struct {
	session, index int
	text           string
}

// question asks about one fact; evidence is the index (into the
// conversation's turns) of the turn that states it.
type question struct {
	category, text string
	evidence       int
}

// conversation is one agent's generated history.
type conversation struct {
	turns     []turn
	questions []question
}

var (
	names       = strings.Fields("Ana Ben Chloe Dmitri Elena Farid Grace Hiro Isla Jonas Keiko Liam Maya Nadia Omar Priya")
	cities      = strings.Fields("Lisbon Oslo Kyoto Denver Nairobi Porto Austin Tallinn Hanoi Quito Dublin Perth")
	animals     = strings.Fields("beagle kitten parrot tortoise hamster labrador ferret rabbit")
	pets        = strings.Fields("Biscuit Pepper Mango Noodle Ziggy Waffles Juniper Pickles Clover Tofu")
	companies   = strings.Fields("Acme Globex Initech Umbrella Hooli Vandelay Stark Wayne")
	months      = strings.Fields("January February March April May June July August September October")
	instruments = strings.Fields("cello banjo ukulele saxophone harmonica violin trumpet accordion")
	parts       = strings.Fields("washer valve gasket cartridge faucet trap")
	dishes      = strings.Fields("lasagna ramen paella moussaka risotto dumplings tagine curry")
	filler      = []string{
		"%s asked how the weekend went and said it was relaxing overall.",
		"%s mentioned being tired today and wanting an early night.",
		"%s said thanks for the help earlier and asked for a quick summary.",
		"%s talked about the weather being grey again this week.",
		"%s wanted ideas for something fun to do with friends on Saturday.",
		"%s asked for a reminder to call back later in the afternoon.",
		"%s said the week was busy but things are finally calming down.",
		"%s shared that the new plan sounds good and asked what comes next.",
	}
)

// fact templates: a statement in a turn and a paraphrased question about
// it, sharing the person's name and some but not all content words.
var facts = []struct {
	category  string
	statement func(r *rand.Rand, n string) (string, string)
}{
	{"pet", func(r *rand.Rand, n string) (string, string) {
		a, p := pick(r, animals), pick(r, pets)
		return fmt.Sprintf("%s adopted a %s from the shelter and decided to call it %s.", n, a, p),
			fmt.Sprintf("What name did %s give the %s they adopted?", n, a)
	}},
	{"work", func(r *rand.Rand, n string) (string, string) {
		c, m := pick(r, companies), pick(r, months)
		return fmt.Sprintf("%s accepted an offer from %s; the new position begins in %s.", n, c, m),
			fmt.Sprintf("When does %s start the job at %s?", n, c)
	}},
	{"travel", func(r *rand.Rand, n string) (string, string) {
		c := pick(r, cities)
		return fmt.Sprintf("%s signed up for the marathon in %s and is training every morning.", n, c),
			fmt.Sprintf("Which city is hosting the marathon %s is running?", n)
	}},
	{"home", func(r *rand.Rand, n string) (string, string) {
		p := pick(r, parts)
		return fmt.Sprintf("%s finally repaired the leaking kitchen sink by replacing the %s.", n, p),
			fmt.Sprintf("How did %s fix the sink that was leaking?", n)
	}},
	{"hobby", func(r *rand.Rand, n string) (string, string) {
		i := pick(r, instruments)
		return fmt.Sprintf("%s has been taking %s lessons twice a week since spring.", n, i),
			fmt.Sprintf("Which instrument lessons is %s taking?", n)
	}},
	{"family", func(r *rand.Rand, n string) (string, string) {
		c, s := pick(r, cities), pick(r, names)
		return fmt.Sprintf("%s's sister %s moved to %s last week for university.", n, s, c),
			fmt.Sprintf("Where did the sister of %s relocate to?", n)
	}},
	{"food", func(r *rand.Rand, n string) (string, string) {
		d := pick(r, dishes)
		return fmt.Sprintf("%s cooked %s for the dinner party and everyone asked for the recipe.", n, d),
			fmt.Sprintf("Which dish did %s make for the dinner party guests?", n)
	}},
}

func pick(r *rand.Rand, xs []string) string { return xs[r.IntN(len(xs))] }

// generate makes a conversation of sessions×turns turns with facts
// facts stated among filler and near-miss distractors (the same kind of
// fact about another person, or the same person's other chatter).
func generate(seed uint64, sessions, turns, nfacts int) conversation {
	r := rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+1))
	people := make([]string, 6)
	for i := range people {
		people[i] = pick(r, names)
	}
	var c conversation
	total := sessions * turns
	isFact := map[int]bool{}
	for len(isFact) < nfacts && len(isFact) < total/2 {
		isFact[r.IntN(total)] = true
	}
	for i := range total {
		n := pick(r, people)
		var user string
		if isFact[i] {
			f := facts[r.IntN(len(facts))]
			st, q := f.statement(r, n)
			user = st
			c.questions = append(c.questions, question{category: f.category, text: q, evidence: i})
		} else if r.IntN(3) == 0 {
			// A near miss: a fact-shaped turn nobody asks about.
			st, _ := facts[r.IntN(len(facts))].statement(r, pick(r, people))
			user = "Someone said " + strings.ToLower(st[:1]) + st[1:] + " Not sure it is true."
		} else {
			user = fmt.Sprintf(pick(r, filler), n)
		}
		reply := fmt.Sprintf("Noted, I will remember that about %s.", n)
		c.turns = append(c.turns, turn{session: i / turns, index: i % turns, text: "user: " + user + "\nassistant: " + reply})
	}
	return c
}
