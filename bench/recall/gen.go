package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// turn is one exchange of a generated conversation: a user message and the
// assistant's reply, in one session. The pipeline makes one chunk of it
// (a user message opens a new chunk).
type turn struct {
	session, index int
	user, reply    string
}

// question asks about facts; evidence are the indexes (into the
// conversation's turns) of the turns that state what answers it: one turn,
// or two for a multi-hop question, or the latest of several for an update.
type question struct {
	kind, topic, text string
	evidence          []int
}

// conversation is one agent's generated history.
type conversation struct {
	turns     []turn
	questions []question
}

// topic is a kind of fact. Its statements and its questions are written
// with different words (a paraphrase): they share the person's name and at
// most one or two content words, which its chatter about the same person
// and other people's facts of the same topic also use. %[1]s is the
// subject (a name, or "Ana's sister" in a question), %[2]s the value,
// %[3]s a month in a dated statement.
type topic struct {
	name      string
	values    []string
	states    []string // first statement of the fact
	updates   []string // a later statement that replaces the value
	dated     []string // a statement with a month (%[3]s)
	questions []string // asks the current value
	seasonal  []string // asks the value in a season (%[3]s)
	chatter   []string // about the subject, no value
}

var (
	names   = strings.Fields("Ana Ben Chloe Dmitri Elena Farid Grace Hiro Isla Jonas Keiko Liam Maya Nadia Omar Priya Quentin Rosa Sven Tariq Ursula Viktor Wen Ximena Yusuf Zoe Aiko Bruno Carmen Diego")
	months  = strings.Fields("January February March April May June July August September October November December")
	seasons = []string{"winter", "winter", "spring", "spring", "spring", "summer", "summer", "summer", "autumn", "autumn", "autumn", "winter"}
	rels    = strings.Fields("sister brother cousin flatmate neighbour colleague")
	relQ    = map[string]string{"sister": "sibling", "brother": "sibling", "cousin": "relative", "flatmate": "housemate",
		"neighbour": "next-door friend", "colleague": "co-worker"}
	filler = []string{
		"%s asked how the weekend went and said it was relaxing overall.",
		"%s mentioned being tired today and wanting an early night.",
		"%s said thanks for the help earlier and asked for a quick summary.",
		"%s talked about the weather being grey again this week.",
		"%s wanted ideas for something fun to do with friends on Saturday.",
		"%s asked for a reminder to call back later in the afternoon.",
		"%s said the week was busy but things are finally calming down.",
		"%s shared that the new plan sounds good and asked what comes next.",
		"Can you draft a short message to %s about Thursday?",
		"Remind me what %s and I talked about last time.",
	}
	replies = []string{
		"Noted, I will remember that.",
		"Got it. Anything else you want me to keep track of?",
		"Thanks for telling me, that is saved.",
		"Understood, I have written that down.",
		"Sounds good, I will keep it in mind.",
		"Okay! I will bring it up again if it matters.",
	}
)

var topics = []topic{
	{name: "pet", values: strings.Fields("Biscuit Pepper Mango Noodle Ziggy Waffles Juniper Pickles Clover Tofu"),
		states:    []string{"%[1]s brought a puppy home from the rescue centre and named it %[2]s.", "%[1]s adopted a tabby kitten; the family agreed on the name %[2]s."},
		updates:   []string{"%[1]s says the pet answers to the name %[2]s now, the old one never stuck.", "After a vote at home %[1]s's pet got renamed %[2]s."},
		dated:     []string{"In %[3]s %[1]s fostered a rescue kitten they nicknamed %[2]s."},
		questions: []string{"What is the name of %[1]s's new pet?", "What name did %[1]s give the pet they adopted?", "What is %[1]s's animal called?"},
		seasonal:  []string{"What was the foster cat %[1]s looked after in the %[3]s called?"},
		chatter:   []string{"%s's puppy chewed through another shoe last night.", "%s walked the dog in the park for an hour.", "%s asked whether the rescue centre needs volunteers.", "%s is worried the vet bills for the pet are getting expensive.", "%s's kitten keeps knocking cups off the table."}},
	{name: "work", values: strings.Fields("Acme Globex Initech Umbrella Hooli Vandelay Stark Wayne Cyberdyne Soylent"),
		states:    []string{"%[1]s got a job offer from %[2]s and signed the contract.", "%[1]s accepted the offer from %[2]s after the third interview."},
		updates:   []string{"%[1]s quit and took a new job at %[2]s, better pay apparently.", "%[1]s handed in notice; %[2]s hired them for a senior role."},
		dated:     []string{"In %[3]s %[1]s did a short contract job for %[2]s."},
		questions: []string{"Which company offered %[1]s a job?", "Who is %[1]s's employer at the moment?", "Where did %[1]s accept a job offer?"},
		seasonal:  []string{"Which company did %[1]s do contract work for in the %[3]s?"},
		chatter:   []string{"%s had a long day of meetings at the office.", "%s's manager praised the quarterly report at work.", "%s is thinking about asking for a raise at the job.", "%s had an interview that went nowhere.", "%s says the new company laptop is slow."}},
	{name: "travel", values: strings.Fields("Lisbon Oslo Kyoto Denver Nairobi Porto Austin Tallinn Hanoi Quito Dublin Perth"),
		states:    []string{"%[1]s booked flights to %[2]s for the holiday.", "%[1]s is off to %[2]s for two weeks of sightseeing."},
		updates:   []string{"%[1]s changed the holiday plan: it is %[2]s now, the flights were cheaper.", "%[1]s cancelled the old booking and picked %[2]s in the end."},
		dated:     []string{"In %[3]s %[1]s spent a long weekend in %[2]s."},
		questions: []string{"Where is %[1]s going on holiday?", "Which destination did %[1]s book flights for?", "What place is %[1]s travelling to for sightseeing?"},
		seasonal:  []string{"Where did %[1]s spend a weekend away in the %[3]s?"},
		chatter:   []string{"%s is comparing flights and hotel prices.", "%s forgot the passport at home on the last trip.", "%s wants a holiday somewhere warm.", "%s asked how early to get to the airport.", "%s's suitcase broke on the way back from a trip."}},
	{name: "home", values: strings.Fields("washer valve gasket cartridge seal hose"),
		states:    []string{"%[1]s got the dripping kitchen tap working again by swapping the %[2]s.", "%[1]s fixed the bathroom drip; a worn %[2]s was the culprit."},
		updates:   []string{"%[1]s says the drip came back, so the plumber put in a new %[2]s.", "Turns out it was the %[2]s after all, %[1]s replaced that too."},
		dated:     []string{"In %[3]s %[1]s replaced a cracked %[2]s under the sink."},
		questions: []string{"What part did %[1]s replace to stop the dripping tap?", "How did %[1]s repair the leaking faucet?", "What was the culprit of %[1]s's bathroom drip?"},
		seasonal:  []string{"What did %[1]s fix under the sink in the %[3]s?"},
		chatter:   []string{"%s said the kitchen is a mess after the renovation.", "%s's plumber never called back about the leak.", "%s asked how to unclog a drain.", "%s is repainting the bathroom this month.", "%s thinks the tap in the kitchen is dripping again."}},
	{name: "hobby", values: strings.Fields("cello banjo ukulele saxophone harmonica violin trumpet accordion"),
		states:    []string{"%[1]s started %[2]s classes with a teacher from the conservatory.", "%[1]s bought a second-hand %[2]s and practises every evening."},
		updates:   []string{"%[1]s dropped that and is learning to play the %[2]s instead.", "%[1]s has moved on to the %[2]s, the old one is for sale."},
		dated:     []string{"In %[3]s %[1]s rented a %[2]s for a short course."},
		questions: []string{"Which instrument is %[1]s learning to play?", "What classes did %[1]s start at the conservatory?", "What does %[1]s practise every evening?"},
		seasonal:  []string{"What instrument did %[1]s hire for lessons in the %[3]s?"},
		chatter:   []string{"%s practised scales for an hour.", "%s's music teacher cancelled the lesson.", "%s wants to join a band one day.", "%s asked for tips on reading sheet music.", "%s went to a concert of the conservatory orchestra."}},
	{name: "family", values: strings.Fields("Lisbon Oslo Kyoto Denver Nairobi Porto Austin Tallinn Hanoi Quito Dublin Perth"),
		states:    []string{"%[1]s's sister just relocated to %[2]s to study.", "%[1]s's sister found a flat in %[2]s."},
		updates:   []string{"%[1]s's sister moved again, she is in %[2]s now.", "%[1]s's sister left for %[2]s last week."},
		dated:     []string{"In %[3]s %[1]s's cousin settled in %[2]s."},
		questions: []string{"Which city did %[1]s's sister relocate to?", "Where did %[1]s's sister find a flat?", "Which town does %[1]s's sibling live in?"},
		seasonal:  []string{"Where did %[1]s's cousin settle in the %[3]s?"},
		chatter:   []string{"%s's sister called to say hello.", "%s's brother is visiting for the weekend.", "%s misses the family a lot.", "%s's cousin is getting married next year.", "%s is planning a family reunion."}},
	{name: "food", values: strings.Fields("lasagna ramen paella moussaka risotto dumplings tagine curry"),
		states:    []string{"%[1]s made %[2]s for the party on Saturday and it was gone in minutes.", "%[1]s served homemade %[2]s to the dinner guests."},
		updates:   []string{"%[1]s says %[2]s is the new signature dish.", "%[1]s now cooks %[2]s whenever friends come round."},
		dated:     []string{"In %[3]s %[1]s learned to cook %[2]s at a class."},
		questions: []string{"What did %[1]s make for the party on Saturday?", "Which dish did %[1]s serve to the dinner guests?", "What food does %[1]s cook for visitors?"},
		seasonal:  []string{"Which recipe did %[1]s pick up in the %[3]s?"},
		chatter:   []string{"%s tried a new recipe that failed.", "%s is hosting a dinner party next week.", "%s asked for a good grocery list.", "%s's oven broke before the party.", "%s wants to eat less takeaway food."}},
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// generator holds a conversation under construction: its turns, some
// reserved slots for facts, and the people it is about.
type generator struct {
	r      *rand.Rand
	c      conversation
	people []string
	free   []int              // unused turn slots, shuffled
	taken  map[[2]string]bool // person, topic: one fact chain each
}

// generate makes a deterministic conversation of sessions×turns turns:
// nq questions (single-hop, update, multi-hop and temporal) whose
// evidence is stated among chatter about the same people and topics,
// other people's facts of the same topic, and filler.
func generate(seed uint64, sessions, turns, nq int) conversation {
	r := rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+1))
	total := sessions * turns
	g := &generator{r: r, taken: map[[2]string]bool{}, free: r.Perm(total)}
	perm := r.Perm(len(names))
	for _, i := range perm[:24] {
		g.people = append(g.people, names[i])
	}
	g.c.turns = make([]turn, total)
	for i := range total {
		g.c.turns[i] = turn{session: i / turns, index: i % turns}
	}
	kinds := []string{"single-hop", "single-hop", "update", "multi-hop", "temporal"}
	for q := 0; q < nq && len(g.free) > 8; q++ {
		g.fact(kinds[q%len(kinds)])
	}
	for i := range g.c.turns {
		t := &g.c.turns[i]
		if t.user == "" {
			n := pick(r, g.people)
			if r.IntN(3) == 0 {
				t.user = fmt.Sprintf(pick(r, pick(r, topics).chatter), n)
			} else {
				if r.IntN(2) == 0 {
					n = pick(r, []string{"my friend", "a colleague", "my neighbour", "someone at work"})
				}
				t.user = fmt.Sprintf(pick(r, filler), n)
			}
		}
		t.reply = pick(r, replies)
	}
	return g.c
}

// slots takes n free turn slots, in conversation order.
func (g *generator) slots(n int) []int {
	s := append([]int(nil), g.free[:n]...)
	g.free = g.free[n:]
	slices.Sort(s)
	return s
}

// fact states one fact (or two, or a fact and its update) in free turns
// and asks a question about it.
func (g *generator) fact(kind string) {
	r := g.r
	tp, n, ok := g.pair("")
	if !ok {
		return
	}
	say := func(at int, tmpl, subj, val, month string) {
		g.c.turns[at].user = fmt.Sprintf(tmpl, subj, val, month)
	}
	q := question{kind: kind, topic: tp.name}
	switch kind {
	case "single-hop":
		s := g.slots(1)
		say(s[0], pick(r, tp.states), n, pick(r, tp.values), "")
		q.text, q.evidence = fmt.Sprintf(pick(r, tp.questions), n), s
	case "update":
		// The first value, then the one that replaces it: the question
		// asks the current value, whose evidence is the later turn.
		s := g.slots(2)
		say(s[0], pick(r, tp.states), n, pick(r, tp.values), "")
		say(s[1], pick(r, tp.updates), n, pick(r, tp.values), "")
		q.text, q.evidence = fmt.Sprintf(pick(r, tp.questions), n), s[1:]
	case "multi-hop":
		// Who the relative is, and a fact about that relative.
		s := g.slots(2)
		rel := pick(r, rels)
		var other string
		if tp, other, ok = g.pair(n); !ok {
			return
		}
		q.topic = tp.name
		g.c.turns[s[0]].user = fmt.Sprintf("%s mentioned that their %s is %s.", n, rel, other)
		if r.IntN(2) == 0 {
			rel = relQ[rel] // the question names the relation another way
		}
		say(s[1], pick(r, tp.states), other, pick(r, tp.values), "")
		q.text, q.evidence = fmt.Sprintf(pick(r, tp.questions), n+"'s "+rel), s
	case "temporal":
		// Two dated facts of one topic about one person, months of
		// different seasons; the question names the season.
		s := g.slots(2)
		m1 := r.IntN(12)
		m2 := (m1 + 3 + r.IntN(6)) % 12
		for seasons[m2] == seasons[m1] {
			m2 = (m2 + 1) % 12
		}
		tmpl := pick(r, tp.dated)
		say(s[0], tmpl, n, pick(r, tp.values), months[m1])
		say(s[1], tmpl, n, pick(r, tp.values), months[m2])
		ask := r.IntN(2)
		m := []int{m1, m2}[ask]
		q.text, q.evidence = fmt.Sprintf(pick(r, tp.seasonal), n, "", seasons[m]), s[ask:ask+1]
	}
	g.c.questions = append(g.c.questions, q)
}

// pair picks a person and a topic that no other question has used (so
// that every question has one answer), not of person not; multi-hop
// questions never ask family facts of a relative.
func (g *generator) pair(not string) (topic, string, bool) {
	for range 10000 {
		tp, n := pick(g.r, topics), pick(g.r, g.people)
		if n == not || g.taken[[2]string{n, tp.name}] || (not != "" && tp.name == "family") {
			continue
		}
		g.taken[[2]string{n, tp.name}] = true
		return tp, n, true
	}
	return topic{}, "", false
}
