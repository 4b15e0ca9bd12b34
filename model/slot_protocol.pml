/* Spin model of the cxlkv slot and participant protocol, hardware-coherence
 * mode (src/region/). What is modelled, the abstractions and their
 * justification, the bounds and the results: docs/model.md.
 *
 * Processes: NP worker participants (P0..P{NP-1}) that each run OPS
 * operations (Store or Load of one of NK keys), one Reclaimer (participant
 * index R = NP: the heartbeat thread of a live participant, which judges
 * others dead and sweeps them, and at the end probes that every key is still
 * storable and loadable), and one Flusher per worker (its x86-TSO store
 * buffer, tso.pml). Format-or-attach is model/format.pml.
 *
 * Faults: a worker may crash (stop forever) at every FP point: with
 * CRASHES=1 one worker (either) may, with CRASHES=2 each may, once. A pause is the Reclaimer judging a *running* worker dead
 * (PAUSES times in all): the worker was stopped past the liveness timeout
 * at whatever step it is at, is reclaimed, and then resumes as a zombie
 * that continues its old steps. With RCRASHES > 0 the Reclaimer may die
 * mid-sweep; the next reclaimer takes the RECLAIMING entry over.
 *
 * The default is layout 5 (issue 24) as src/region/ has it: NE = 2 x NSLOT
 * index entries (state word, key, CRC, set tag, data pointer) name NSLOT
 * data slots (payload, and a data word [gen][owner participant][state]
 * FREE / HELD / MOVING); a Store claims an entry, then a FREE data slot or,
 * through this process's victim queue, the data slot of a READY entry it
 * evicts (MoveDataSlot); the slot stays MOVING(writer) until the entry is
 * READY, then HELD; the CRC binds the data slot index. Entry 0 starts READY
 * with key NK in data slot 0 (NO_PRELOAD: not). NENT=n: n entries.
 * P0OP/P0KEY/P1OP/P1KEY (P2OP/P2KEY with NP=3; P1OP2/P1KEY2: P1's second
 * operation with OPS=2): fixed roles (1 Store, 2 Load, 3 Drop of that key).
 *
 * Variants (-D flags): OLD_PROTOCOL is the protocol as of 4c4094f (layout
 * v1: CRC over the payload only, CommitWrite stores the CRC before and
 * regardless of its CAS, BeginWrite writes key and tag after the claim
 * without a re-check, tags cleared before the freeing CAS). V2_PROTOCOL is
 * layout v2 (the data in its slot: NSLOT slots, no data words);
 * UNBOUND_CRC is v2 without the CRC trailer (the ownership checks alone).
 * Layout 5: LEASE_WORD (the default for layout 5) is the protocol with the
 * data word naming its holder lease (entry, entry generation) instead of a
 * participant (PARTICIPANT_WORD, layout 5 as first landed: docs/model.md,
 * its data-slot counterexample F1); its mutants
 * MUT_ANY_LEASE and MUT_ENTRY_ONLY drop (part of) its check in the move.
 * MUT_DATA_FIRST (a mutant of Drop's FreeTakenEntry) frees the data word
 * before the entry; DROP_TAKES_EVICTING is Drop as it was before
 * TakeReadySlot refused a word that is not READY (it took an EVICTING word
 * its Find returned from another evictor: docs/model.md, l5-drop-evicting).
 * PUT_BACK and SETTLE_RESTORE (with PARTICIPANT_WORD) are partial patches
 * of the participant-word protocol that were tried (each leaves a
 * counterexample). UNBOUND_DATA: the
 * CRC without the data slot index. REACH_STALE turns the victim queue's
 * stale pop into an assertion (a reachability probe). CHECK_READS_ONLY keeps only the reader property (the
 * old-protocol run that must find defect 1 reports nothing else first);
 * CHECK_SETTLE_ONLY keeps only the end-state properties (slots settle, keys
 * stay storable).
 *
 * Every step names the failpoint (marked `@fp`, a CXLKV_FAILPOINT_HIT name)
 * or the C++ function (marked `@fn`) of src/region/ it stands for;
 * scripts/check-model-names.sh checks that each still exists there.
 */

#ifndef NP
#define NP 2
#endif
#ifndef NSLOT
#define NSLOT 1
#endif
#ifndef NK
#define NK 2
#endif
#ifndef OPS
#define OPS 2
#endif
#ifndef OPS0
#define OPS0 OPS  /* P0's operations (an asymmetric bound: P0 fewer) */
#endif
#ifndef SBSZ
#define SBSZ 2
#endif
#ifndef CRASHES
#define CRASHES 1
#endif
#ifndef PAUSES
#define PAUSES 1
#endif
#ifndef RCRASHES
#define RCRASHES 0
#endif
#ifndef P2OP
#define P2OP 0   /* a third worker's role (NP=3): none */
#define P2KEY 0
#endif
#ifndef P1OP2
#define P1OP2 P1OP   /* P1's second operation (OPS=2) */
#define P1KEY2 P1KEY
#endif
/* The role of worker `me` in its operation `op` (1-based). */
#define ROLEOP (me == 0 -> P0OP : (me == 1 -> (op == 2 -> P1OP2 : P1OP) : P2OP))
#define ROLEKEY (me == 0 -> P0KEY : (me == 1 -> (op == 2 -> P1KEY2 : P1KEY) : P2KEY))

#if defined(OLD_PROTOCOL) || defined(V2_PROTOCOL)
#define INPLACE          /* layouts 1 and 2: the payload lives in its slot */
#endif
/* Layout 5's data word names its holder lease (entry, entry generation):
 * the engine's protocol (src/region/layout.h, DataState). PARTICIPANT_WORD
 * is layout 5 as it first landed, the word naming a participant: its
 * data-slot counterexample (F1) is case l5-participant-word. */
#if !defined(INPLACE) && !defined(PARTICIPANT_WORD) && !defined(LEASE_WORD)
#define LEASE_WORD
#endif
#ifdef INPLACE
#define NE NSLOT         /* index entries = slots */
#elif defined(NENT)
#define NE NENT          /* layout 5 with another number of entries */
#else
#define NE (2 * NSLOT)   /* layout 5: 2 x data slots index entries */
#endif

#define R NP             /* the reclaimer's participant index */
#define NPROC (NP + 1)
#define NBUF NP          /* workers have store buffers; the reclaimer is SC */
#define NONE 255

/* Slot state word [generation][owner][state] (layout.h SlotState). */
#define S_FREE 0
#define S_WRITING 1
#define S_READY 2
#define S_EVICTING 3
/* Participant state word (layout.h ParticipantState). */
#define P_FREE 0
#define P_ACTIVE 1
#define P_RECLAIMING 2
/* Store outcomes (region.h StoreOutcome). */
#define O_NONE 0
#define O_STORED 1
#define O_DUP 2
#define O_LOSTRACE 3
#define O_FULL 4
#define O_FENCED 5

/* Plain-stored words of slot (entry) s, as indexes into mem[]: the key
 * fields (key_hi, key_lo, ns and len are stored and checked alike: one word
 * here), the CRC word, the payload (layout 5: the entry's data pointer; the
 * payload is data slot d's word A_DATA(d)), the set tag of its way. */
#define A_KEY(s) ((s) * 4)
#define A_CRC(s) ((s) * 4 + 1)
#ifdef INPLACE
#define A_DATA(s) ((s) * 4 + 2)
#define NMEM (NSLOT * 4)
#else
#define A_DPTR(s) ((s) * 4 + 2)
#define A_DATA(d) (NE * 4 + (d))
#define NMEM (NE * 4 + NSLOT)
#endif
#define A_TAG(s) ((s) * 4 + 3)

/* "Bytes" are a tag (writer, generation of its lease, key; layout 5 also
 * the entry): a payload is equal to another only if it is the same
 * writer's copy for the same lease. 0 = bytes nobody wrote. Keys are 1..NK
 * and the set tag of key k is k. */
#ifdef INPLACE
#define TOK(w, e, g, k) ((((w) * 16) + (g)) * 4 + (k))
#define TOKW(t) ((t) / 64)
#else
#define TOK(w, e, g, k) (((((w) * NE + (e)) * 16) + (g)) * 4 + (k))
#define TOKW(t) ((t) / (NE * 64))
#endif
#define TOKG(t) (((t) / 4) % 16)
#define TOKKEY(t) ((t) % 4)
/* The CRC as a value: CRC32C collisions are not modelled, so the CRC of a
 * payload is the payload's tag. Layout v2 extends it with the trailer
 * (generation, key); v1 covers the payload only; layout 5's trailer also
 * binds the data slot index d (UNBOUND_DATA leaves d out). */
#if defined(OLD_PROTOCOL) || defined(UNBOUND_CRC)
#define CRCV(t, g, k, d) (t)
#elif defined(INPLACE)
#define CRCV(t, g, k, d) ((t) + 256 * ((g) * 4 + (k)))
#elif defined(UNBOUND_DATA)
#define CRCV(t, g, k, d) ((t) + (NPROC * NE * 64) * ((g) * 4 + (k)))
#else
#define CRCV(t, g, k, d) ((t) + (NPROC * NE * 64) * (((g) * 4 + (k)) * NSLOT + (d)))
#endif

#ifdef INPLACE
short mem[NMEM];
#else
int mem[NMEM];
#endif
byte sst[NE];   /* slot (entry) state word: state */
byte sgen[NE];  /*                          generation */
byte sown[NE];  /*                          owner */
byte pin[NE];   /* pin word: bit p = participant p pins the slot */
#ifndef INPLACE
/* Data slot words (layout 5, layout.h DataState): [generation][owner
 * participant][state] FREE / HELD / MOVING. FREE(g) -> MOVING(g, writer)
 * (ClaimDataSlot); HELD or MOVING -> MOVING(g, me) (DetachDataSlot: an
 * eviction, a drop); MOVING(g, me) -> HELD(g, me) after the writer's entry
 * is READY (SettleDataSlot); the exact word -> FREE(g+1) (ReleaseDataSlot). */
#define D_FREE 0
#define D_HELD 1
#define D_MOVING 2
byte dsst[NSLOT];
byte dsgen[NSLOT];
byte dsown[NSLOT];
#endif
byte pst[NPROC];   /* participant state word (incarnations never repeat:
                      no entry is re-registered in this model) */
bool crashed[NPROC];
byte ndone;        /* workers finished or crashed */
byte crashmask;  /* workers that may crash (once each): chosen in init */
byte pause_budget = PAUSES;
byte rcrash_budget = RCRASHES;
short ready_tok[NE];  /* ghost: the payload tag the commit of the slot's
                          current generation published */

#include "tso.pml"

/* A crash point: the worker stops forever here (its buffered stores still
 * drain). */
/* The choice reads only a local (mayfail), so partial-order reduction
 * still applies around it. */
#define FP \
  if \
  :: mayfail -> goto crashed_ \
  :: true \
  fi

/* Atomic load of the whole state word. */
inline LOADW(s) {
  d_step { wg = sgen[s]; wo = sown[s]; ws = sst[s] }
}

/* compare_exchange_strong on the state word (a locked instruction). */
inline CASW(s, eg, eo, es, ng, no, ns, ok) {
  DRAIN(me);
  d_step {
    if
    :: sgen[s] == eg && sown[s] == eo && sst[s] == es ->
       sgen[s] = ng; sown[s] = no; sst[s] = ns; ok = true
    :: else -> ok = false
    fi
  }
}

#ifndef INPLACE
/* Atomic load of data slot dd's word (layout 5). */
inline LOADD(dd) {
  d_step { xg = dsgen[dd]; xo = dsown[dd]; xst = dsst[dd] }
}

/* compare_exchange_strong on data slot dd's word. */
inline CASD(dd, eg, eo, es, ng, no, ns, okv) {
  DRAIN(me);
  d_step {
    if
    :: dsgen[dd] == eg && dsown[dd] == eo && dsst[dd] == es ->
       dsgen[dd] = ng; dsown[dd] = no; dsst[dd] = ns; okv = true
    :: else -> okv = false
    fi
  }
}

/* @fn RegionImpl::ReleaseDataSlot: the exact word MOVING(g, o) -> FREE(g+1). */
inline RELEASE_DATA(dd, g, o) {
#ifdef LEASE_WORD
  CASD(dd, g, o, D_MOVING, 0, 0, D_FREE, dok);
#else
  CASD(dd, g, o, D_MOVING, g + 1, 0, D_FREE, dok);
#endif
  if
  :: dok -> printf("MSC: P%d frees data slot %d\n", me, dd)
  :: else
  fi;
  dok = false
}

/* The writer's own data word: MOVING(gen mydg, owner MYDO). LEASE_WORD
 * (the proposed fix): the word names its holder lease, (entry, entry
 * generation), not a participant. */
#ifdef LEASE_WORD
#define MYDO myslot
#else
#define MYDO me
#endif

/* A detach from an entry we then failed to free or claim: without
 * PUT_BACK (the code as first written) the data slot is released; with it,
 * our MOVING word goes back to HELD (owner as seen). */
#ifdef PUT_BACK
#define UNDETACH(dd, g, o) CASD(dd, g, me, D_MOVING, g, o, D_HELD, dok); dok = false
#else
#define UNDETACH(dd, g, o) RELEASE_DATA(dd, g, me)
#endif

/* @fn RegionImpl::DetachDataSlot: entry e is ours (taken from READY); the
 * data slot it names, HELD or MOVING(g) -> MOVING(g+1, me) (a new
 * generation: the replaced holder's settle or release can never match).
 * dd = NONE if the word is in neither state or changed. */
inline DETACH(e, dd, dg) {
  LD(me, A_DPTR(e), dd);
  LOADD(dd);
  if
  :: xst == D_HELD || xst == D_MOVING ->
     CASD(dd, xg, xo, xst, xg + 1, me, D_MOVING, dok);
     if
     :: dok -> dg = xg + 1; dgo = xo; printf("MSC: P%d detaches data slot %d from entry %d\n", me, dd, e)
     :: else -> dd = NONE
     fi
  :: else -> dd = NONE
  fi;
  xg = 0; xo = 0; xst = 0; dok = false
}
#endif

/* @fn RegionImpl::ClearTag: CAS tag -> 0. */
inline CLEARTAG(s, tag) {
  DRAIN(me);
  d_step {
    if
    :: mem[A_TAG(s)] == tag -> mem[A_TAG(s)] = 0
    :: else
    fi
  }
}

/* @fn RegionImpl::Find: tag hint, then state, key, state again. */
inline FIND(k, readable_only) {
  fs = NONE;
  s = 0;
  do
  :: s < NE ->
     LD(me, A_TAG(s), t);
     if
     :: t == k ->
        LOADW(s);
        if
        :: ws == S_READY || ws == S_EVICTING || (!readable_only && ws == S_WRITING) ->
           /* @fn RegionImpl::KeyMatches */
           LD(me, A_KEY(s), t);
           if
           :: t == k ->
              d_step {
                t = (sgen[s] == wg && sown[s] == wo && sst[s] == ws);
                if
                :: t -> fs = s; fg = wg; fo = wo; fst = ws
                :: else
                fi
              }
              if
              :: fs != NONE -> break
              :: else
              fi
           :: else
           fi
        :: else
        fi
     :: else
     fi;
     s++
  :: else -> break
  od;
  t = 0
}

/* @fn RegionImpl::TakeReadySlot: the word seen (READY: st) -> EVICTING
 * (evictor), then the pin check; a pin restores the exact word seen (its
 * generation and writer unchanged). A Drop passes the word its Find
 * returned (TAKE_WORD, below). */
inline TAKE_WORD(s, g, o, st, ok) {
  CASW(s, g, o, st, g, me, S_EVICTING, ok);
  if
  :: ok ->
     printf("MSC: P%d takes slot %d (gen %d) to evict it\n", me, s, g);
#ifndef OLD_PROTOCOL
     /* @fp evict.after_take (v2; v1 has the step, not the failpoint) */
#endif
     FP;
     /* @fn RegionImpl::SlotPinned */
     if
     :: pin[s] != 0 ->
        FP;
        CASW(s, g, me, S_EVICTING, g, o, st, t);
        t = 0;
        ok = false
     :: else
     fi
  :: else
  fi
}
#define TAKE_READY(s, g, o, ok) TAKE_WORD(s, g, o, S_READY, ok)

/* @fn RegionImpl::ClaimSlot: a free way first (in way order), else the
 * least recently used READY way. The recency (last_use) is not modelled:
 * any READY way may be passed over, so every order the policy can produce
 * is covered. */
inline CLAIM(k) {
  claimed = false;
  s = 0;
  do
  :: s < NE ->
     LOADW(s);
     if
     :: ws == S_FREE ->
        CASW(s, wg, wo, S_FREE, wg + 1, me, S_WRITING, ok);
        if
        :: ok -> claimed = true; myslot = s; mygen = wg + 1; break
        :: else
        fi
     :: else
     fi;
     s++
  :: else -> break
  od;
#ifndef OLD_PROTOCOL
  /* v2: before evicting anything, a READY copy of the key whose tag was
     lost (Find skipped it) is looked for ignoring tags: fs, fg, fo. */
  s = 0;
  do
  :: !claimed && s < NE ->
     LOADW(s);
     if
     :: ws == S_READY ->
        LD(me, A_KEY(s), t);
        if
        :: t == k ->
           d_step {
             if
             :: sgen[s] == wg && sown[s] == wo && sst[s] == ws -> fs = s; fg = wg; fo = wo; fst = ws
             :: else
             fi
           }
        :: else
        fi;
        t = 0
     :: else
     fi;
     if
     :: fs != NONE -> break
     :: else -> s++
     fi
  :: else -> break
  od;
#endif
  if
  :: !claimed && fs == NONE ->
     select (start : 0 .. NE - 1);
     c = 0;
     do
     :: c < 2 * NE && !claimed ->
        s = (start + c) % NE;
        LOADW(s);
        if
        :: ws == S_READY ->
           if
           :: c < NE -> skip  /* eviction order: any way may be passed over */
           :: pin[s] != 0 -> skip  /* SlotPinned pre-check */
           :: pin[s] == 0 ->
              TAKE_READY(s, wg, wo, ok);
              if
              :: ok ->
                 FP;
#ifdef LEASE_WORD
                 /* layout 5, LEASE_WORD: the entry, then its data slot
                    re-labelled (v, g) -> MOVING(v, g+1) */
                 CASW(s, wg, me, S_EVICTING, wg + 1, me, S_WRITING, ok);
                 if
                 :: ok ->
                    claimed = true; myslot = s; mygen = wg + 1;
                    LD(me, A_DPTR(s), d);
                    FP;
                    LOADD(d);
                    if
                    :: (xst == D_HELD || xst == D_MOVING) && xo == s && xg == wg ->
                       CASD(d, xg, xo, xst, mygen, myslot, D_MOVING, dok);
                       if
                       :: dok -> myd = d; mydg = mygen
                       :: else
                       fi
                    :: else
                    fi;
                    d = 0; xg = 0; xo = 0; xst = 0; dok = false
                 :: else
                 fi
#elif !defined(INPLACE)
                 /* layout 5: both index sets full; the entry taken comes
                    with its data slot (DetachDataSlot), else it is put back */
                 DETACH(s, d, dg);
                 if
                 :: d == NONE ->
                    /* @fn RegionImpl::RestoreEvictedBlock */
                    CASW(s, wg, me, S_EVICTING, wg, TOKW(ready_tok[s]), S_READY, ok);
                    ok = false
                 :: else -> FP
                 fi;
                 if
                 :: d != NONE ->
#endif
#ifndef LEASE_WORD
                 CASW(s, wg, me, S_EVICTING, wg + 1, me, S_WRITING, ok);
                 if
                 :: ok -> claimed = true; myslot = s; mygen = wg + 1
#ifndef INPLACE
                    ; myd = d; mydg = dg
                 :: !ok -> UNDETACH(d, dg, dgo)
#else
                 :: else
#endif
                 fi
#ifndef INPLACE
                 :: else
                 fi;
                 d = 0; dg = 0; dgo = 0
#endif
#endif
              :: else
              fi
           fi
        :: else
        fi;
        c++
     :: else -> break
     od;
     start = 0; c = 0
  :: else
  fi;
  s = 0;
  wg = 0; wo = 0; ws = 0
}

/* Where a writer's payload goes: its slot (layouts 1, 2), its data slot
 * (layout 5). */
#ifdef INPLACE
#define WSLOT myslot
#define RSLOT fs
#else
#define WSLOT myd
#define RSLOT d
#endif

/* The writer still owns its slot: the state word equals its WRITING word
 * (v2: before every metadata store). */
#define OWNS (sgen[myslot] == mygen && sown[myslot] == me && sst[myslot] == S_WRITING)

/* @fn RegionImpl::ReleaseOwnedSlot */
inline RELEASE_OWNED() {
#ifdef OLD_PROTOCOL
  /* v1: tag 0 stored before the CAS, whether or not we still own it. */
  ST(me, A_TAG(myslot), 0);
  FP;
  CASW(myslot, mygen, me, S_WRITING, mygen, 0, S_FREE, ok);
#else
  /* v2: read the tag, check ownership, clear the tag while owning, free. */
  LD(me, A_TAG(myslot), t);
  FP;
  if
  :: OWNS ->
     FP;
     CLEARTAG(myslot, t);
     FP;
     CASW(myslot, mygen, me, S_WRITING, mygen, 0, S_FREE, ok)
  :: else
  fi;
  t = 0
#endif
}

#ifndef OLD_PROTOCOL
/* @fn RegionImpl::TakeAndFreeSlot: CAS word -> WRITING(gen+1, us), then
 * release it as its owner (v2: freeing a slot that is not ours). */
inline TAKE_AND_FREE(s, g, o, st) {
  CASW(s, g, o, st, g + 1, me, S_WRITING, ok);
  if
  :: ok ->
     printf("MSC: P%d takes slot %d (gen %d) to free it\n", me, s, g);
     myslot = s; mygen = g + 1;
     FP;
#ifndef INPLACE
     /* layout 5: a READY entry's data slot goes with it; any other entry's
        pointer may be a previous block's (the data sweep settles a dead
        writer's MOVING slot) */
#ifdef LEASE_WORD
     RELEASE_OWNED();
     /* LEASE_WORD: the data slot of the lease taken goes with it (else the
        orphan rule frees it) */
     if
     :: st == S_READY ->
        LD(me, A_DPTR(s), d);
        LOADD(d);
        if
        :: (xst == D_HELD || xst == D_MOVING) && xo == s && xg == g ->
           FP; CASD(d, xg, xo, xst, 0, 0, D_FREE, dok)
        :: else
        fi;
        d = 0; xg = 0; xo = 0; xst = 0; dok = false
     :: else
     fi;
#else
     d = NONE;
     if
     :: st == S_READY -> DETACH(s, d, dg)
     :: else
     fi;
#endif
#endif
#ifndef LEASE_WORD
     RELEASE_OWNED();
#endif
#if !defined(INPLACE) && !defined(LEASE_WORD)
     if
     :: d != NONE -> FP; RELEASE_DATA(d, dg, me)
     :: else
     fi;
     d = 0; dg = 0; dgo = 0;
#endif
     myslot = 0; mygen = 0
  :: else
  fi;
  ok = false
}

/* @fn RegionImpl::RepairTag: set the tag of a READY slot that lost it, if
 * the slot still holds the word seen. */
inline REPAIR_TAG(s, g, o, tag) {
  LD(me, A_TAG(s), t);
  if
  :: t != tag ->
     FP;
     if
     :: sgen[s] == g && sown[s] == o && sst[s] == S_READY ->
        FP;
        DRAIN(me);
        d_step {
          if
          :: mem[A_TAG(s)] == t -> mem[A_TAG(s)] = tag
          :: else
          fi
        }
     :: else
     fi
  :: else
  fi;
  t = 0
}
#endif

#ifndef INPLACE
/* @fn RegionImpl::RefillVictims: the sweep over the index that fills this
 * process's victim queue with READY unpinned entries and the words seen.
 * Recency (last_use, depth) is not modelled: any of them may be the one
 * queued, which covers every order a policy can produce. */
inline REFILL() {
  s = 0;
  do
  :: s < NE ->
     LOADW(s);
     if
     :: ws == S_READY && pin[s] == 0 && vq == NONE -> vq = s; vqg = wg; vqo = wo
     :: ws == S_READY && pin[s] == 0 && vq != NONE ->
        if
        :: vq = s; vqg = wg; vqo = wo
        :: skip
        fi
     :: else
     fi;
     s++
  :: else -> break
  od;
  s = 0; wg = 0; wo = 0; ws = 0
}

/* @fn RegionImpl::MoveDataSlot: TakeReadySlot(victim v, READY word g/o:
 * pins checked), DetachDataSlot (its data slot -> MOVING(me)), the victim
 * entry EVICTING -> FREE (ReleaseOwnedSlot, tag cleared while ours; on
 * failure the data slot is released), then evict.mid_move. Our data slot
 * stays MOVING(me) until our entry commits. */
#ifdef LEASE_WORD
/* The move's lease check: the data word names the victim's lease (entry v,
 * generation g). MUT_ANY_LEASE drops it (any HELD or MOVING word is taken);
 * MUT_ENTRY_ONLY checks the entry but not its generation. */
#if defined(MUT_ANY_LEASE)
#define LEASE_IS(v, g) true
#elif defined(MUT_ENTRY_ONLY)
#define LEASE_IS(v, g) (xo == (v))
#else
#define LEASE_IS(v, g) (xo == (v) && xg == (g))
#endif

/* LEASE_WORD: TakeReadySlot(v); its pointer d; the victim entry -> FREE
 * (tag cleared while ours); evict.mid_move; then the data word of v's
 * lease (v, g), HELD or MOVING (its writer between READY and settle) ->
 * MOVING(our entry, our generation). A stale pointer or a re-leased victim
 * fails that CAS: the word names another lease. */
inline MOVE_DATA(v, g, o) {
  TAKE_READY(v, g, o, ok);
  if
  :: ok ->
     LD(me, A_DPTR(v), d);
     LD(me, A_TAG(v), t);
     if
     :: sgen[v] == g && sown[v] == me && sst[v] == S_EVICTING ->
        CLEARTAG(v, t);
        FP;
        CASW(v, g, me, S_EVICTING, g, 0, S_FREE, ok)
     :: else -> ok = false
     fi;
     t = 0;
     if
     :: ok ->
        printf("MSC: P%d frees entry %d (gen %d) to take its data slot %d\n", me, v, g, d);
        /* @fp evict.mid_move */
        FP;
        LOADD(d);
        if
        :: (xst == D_HELD || xst == D_MOVING) && LEASE_IS(v, g) ->
           CASD(d, xg, xo, xst, mygen, myslot, D_MOVING, dok);
           if
           :: dok -> myd = d; mydg = mygen; printf("MSC: P%d: data slot %d now for entry %d\n", me, d, myslot)
           :: else
           fi
        :: else
        fi
     :: else
     fi
  :: else
  fi;
  d = 0; xg = 0; xo = 0; xst = 0; dok = false; ok = false
}
#else
inline MOVE_DATA(v, g, o) {
  TAKE_READY(v, g, o, ok);
  if
  :: ok ->
     DETACH(v, d, dg);
     if
     :: d == NONE ->
        /* @fn RegionImpl::RestoreEvictedBlock */
        CASW(v, g, me, S_EVICTING, g, TOKW(ready_tok[v]), S_READY, ok)
     :: else ->
        printf("MSC: P%d moves data slot %d away from entry %d (gen %d)\n", me, d, v, g);
        FP;
        LD(me, A_TAG(v), t);
        if
        :: sgen[v] == g && sown[v] == me && sst[v] == S_EVICTING ->
           CLEARTAG(v, t);
           FP;
           CASW(v, g, me, S_EVICTING, g, 0, S_FREE, ok)
        :: else -> ok = false
        fi;
        t = 0;
        if
        :: !ok ->
           printf("MSC: P%d: entry %d is no longer its own: gives data slot %d up\n", me, v, d);
           UNDETACH(d, dg, dgo)
        :: ok ->
           /* @fp evict.mid_move */
           myd = d; mydg = dg
        fi
     fi
  :: else
  fi;
  d = 0; dg = 0; dgo = 0; ok = false
}
#endif

/* @fn RegionImpl::AcquireDataSlot: @fn RegionImpl::ClaimDataSlot (a FREE
 * data slot -> MOVING(me)), else up to two victims popped from this
 * process's queue (@fn RegionImpl::NextVictim, refilled when empty; a
 * popped entry whose word changed since it was queued is stale and
 * passed over), each tried with MoveDataSlot. */
inline ACQUIRE_DATA() {
  d = 0;
  do
  :: myd == NONE && d < NSLOT ->
     LOADD(d);
     if
     :: xst == D_FREE ->
#ifdef LEASE_WORD
        CASD(d, xg, xo, D_FREE, mygen, myslot, D_MOVING, dok);
        if
        :: dok -> myd = d; mydg = mygen
#else
        CASD(d, xg, xo, D_FREE, xg, me, D_MOVING, dok);
        if
        :: dok -> myd = d; mydg = xg
#endif
        :: else
        fi;
        dok = false
     :: else
     fi;
     d++
  :: else -> break
  od;
  d = 0; xg = 0; xo = 0; xst = 0;
  c = 0;
  do
  :: myd == NONE && c < 2 ->
     if
     :: vq == NONE -> REFILL()
     :: else
     fi;
     if
     :: vq == NONE -> break
     :: else
     fi;
     s = vq; wg = vqg; wo = vqo; vq = NONE; vqg = 0; vqo = 0;
     d_step { ok = (sst[s] == S_READY && sgen[s] == wg && sown[s] == wo) }
     if
     :: !ok -> printf("MSC: P%d pops entry %d from its victim queue: stale, passed over\n", me, s)
#ifdef REACH_STALE
        ; assert(false)  /* reachability probe for the stale pop */
#endif
     :: ok && pin[s] != 0 -> skip  /* pinned since it was queued (SlotPinned pre-check) */
     :: ok && pin[s] == 0 -> FP; MOVE_DATA(s, wg, wo)
     fi;
     c++
  :: else -> break
  od;
  c = 0; s = 0; wg = 0; wo = 0; ws = 0; ok = false
}

/* A MOVING data slot whose owner is dead (@fn RegionImpl::SettleMovingSlots,
 * from the reclaim sweep's @fn RegionImpl::SettleOrphanedData and from
 * SweepOrphans): HELD if a READY or EVICTING entry names it (the mover
 * died before it freed the victim, or the writer between READY and
 * settle), else released FREE(g+1). SETTLE_RESTORE: an EVICTING entry
 * naming it is first restored READY if its owner is dead (left alone, and
 * the data word too, if its owner is alive): HELD only under a READY
 * entry. */
inline RESOLVE_MOVING(dd, rec) {
  LOADD(dd);
  if
  :: xst == D_MOVING && (xo == rec || pst[xo] == P_FREE) ->
     t = 0;
     do
     :: t < NE ->
        d_step {
          if
          :: (sst[t] == S_READY || sst[t] == S_EVICTING) && mem[A_DPTR(t)] == dd ->
             wg = sgen[t]; wo = sown[t]; ws = sst[t]
          :: else -> ws = S_FREE
          fi
        }
        if
        :: ws != S_FREE -> break
        :: else -> t++
        fi
     :: else -> break
     od;
#ifdef SETTLE_RESTORE
     if
     :: t < NE && ws == S_EVICTING && pst[wo] != P_FREE -> t = NE + 1  /* its evictor's to take */
     :: t < NE && ws == S_EVICTING && pst[wo] == P_FREE ->
        /* @fn RegionImpl::RestoreEvictedBlock first: HELD only under READY */
        CASW(t, wg, wo, S_EVICTING, wg, TOKW(ready_tok[t]), S_READY, ok);
        if
        :: !ok -> t = NE + 1  /* the entry changed: decide on a later pass */
        :: else
        fi;
        ok = false
     :: else
     fi;
#endif
     if
     :: t < NE ->
        CASD(dd, xg, xo, D_MOVING, xg, xo, D_HELD, dok);
        if
        :: dok -> printf("MSC: P%d: data slot %d (P%d dead) stays with entry %d: HELD\n", me, dd, xo, t)
        :: else
        fi
     :: t == NE ->
        CASD(dd, xg, xo, D_MOVING, xg + 1, 0, D_FREE, dok);
        if
        :: dok -> printf("MSC: P%d: data slot %d (P%d dead) named by no READY entry: freed\n", me, dd, xo)
        :: else
        fi
     :: t > NE
     fi;
     t = 0; wg = 0; wo = 0; ws = 0
  :: else
  fi;
  dok = false; xg = 0; xo = 0; xst = 0
}
#endif

#ifdef LEASE_WORD
/* @fn RegionImpl::FreeLeaseData: data slot dd's word, if it still names the
 * lease (entry e, generation g) (DataLeaseIs: HELD or MOVING), -> FREE. */
inline FREE_LEASE_DATA(dd, e, g) {
  LOADD(dd);
  if
  :: (xst == D_HELD || xst == D_MOVING) && xo == (e) && xg == (g) ->
     FP;
     CASD(dd, xg, xo, xst, 0, 0, D_FREE, dok);
     if
     :: dok -> printf("MSC: P%d frees data slot %d (lease entry %d gen %d)\n", me, dd, e, g)
     :: else
     fi
  :: else
  fi;
  xg = 0; xo = 0; xst = 0; dok = false
}

/* @fn RegionImpl::FreeTakenEntry: entry s, taken by us (EVICTING(g, me)):
 * its data pointer read while it is ours; the entry FREE at generation g
 * (@fn RegionImpl::ReleaseOwnedSlot: the tag read, ownership checked, the
 * tag cleared, the CAS); only if that CAS succeeded, the data word of the
 * lease (s, g). A reclaim meanwhile (the entry READY again at g, restored
 * by the sweep) fails the ownership check or the CAS: the data slot stays.
 * MUT_DATA_FIRST (a mutant): the data word first, whether or not the entry
 * is then freed. */
inline FREE_TAKEN(s, g) {
  LD(me, A_DPTR(s), d);
#ifdef MUT_DATA_FIRST
  FP;
  FREE_LEASE_DATA(d, s, g);
#endif
  FP;
  LD(me, A_TAG(s), t);
  FP;
  if
  :: sgen[s] == g && sown[s] == me && sst[s] == S_EVICTING ->
     FP;
     CLEARTAG(s, t);
     FP;
     CASW(s, g, me, S_EVICTING, g, 0, S_FREE, ok)
  :: else -> ok = false
  fi;
  t = 0;
  if
  :: ok ->
     printf("MSC: P%d drops entry %d (gen %d)\n", me, s, g);
#ifndef MUT_DATA_FIRST
     FP;
     FREE_LEASE_DATA(d, s, g)
#endif
  :: else -> printf("MSC: P%d: entry %d is no longer its own: not dropped\n", me, s)
  fi;
  d = 0; ok = false
}

/* @fn RegionImpl::Drop: CheckWritable (@fn RegionImpl::StillRegistered),
 * Find of the key (readable: READY or EVICTING), @fn RegionImpl::TakeReadySlot
 * of the word found (a pin restores it), then FreeTakenEntry. TakeReadySlot
 * takes only a READY word: an EVICTING one is another evictor's, whose pin
 * check and restore must find its own word. DROP_TAKES_EVICTING is the code
 * before that check (the word found, EVICTING too, was taken). */
inline DROP(k) {
  FP;
  if
  :: pst[me] != P_ACTIVE -> outcome = O_FENCED
  :: else ->
     FP;
     FIND(k, true);
     if
     :: fs == NONE -> printf("MSC: P%d: drop of key %d finds nothing\n", me, k)
#ifdef DROP_TAKES_EVICTING
     :: fs != NONE ->
#else
     :: fs != NONE && fst != S_READY -> printf("MSC: P%d: key %d is being evicted: busy\n", me, k)
     :: fs != NONE && fst == S_READY ->
#endif
        FP;
        TAKE_WORD(fs, fg, fo, fst, ok);
        if
        :: ok -> FP; FREE_TAKEN(fs, fg)
        :: else -> printf("MSC: P%d: drop of key %d: busy\n", me, k)
        fi
     fi
  fi;
  fs = NONE; fg = 0; fo = 0; fst = 0; ok = false
}
#endif

/* A metadata store by a writer: v2 checks ownership first (the residual
 * window between the check and the store is what the CRC binding makes
 * harmless). */
#ifdef OLD_PROTOCOL
#define META_ST(addr, val) ST(me, addr, val)
#else
#define META_ST(addr, val) \
  if \
  :: OWNS -> FP; ST(me, addr, val) \
  :: else -> lost = true \
  fi
#endif

#ifndef INPLACE
/* The writer's data slot, if it holds one, goes back (ReleaseDataSlot of
 * its exact MOVING word: a no-op once a reclaim settled it). */
inline GIVE_DATA_BACK() {
  if
  :: myd != NONE -> RELEASE_DATA(myd, mydg, MYDO); myd = NONE; mydg = 0
  :: else
  fi
}
#endif

/* @fn RegionImpl::CommitWrite. from_source: the CRC comes from the
 * writer's source (Store, the GPU path with gpu_crc); else it is computed
 * over the slot's bytes (the GPU path without gpu_crc). */
inline COMMIT(from_source) {
  if
  :: from_source -> crc = CRCV(mytok, mygen, k, myd)
  :: else ->
     LD(me, A_DATA(WSLOT), crc);
     printf("MSC: P%d CommitWrite(nullptr): CRC over the bytes now in slot %d\n", me, WSLOT);
     crc = CRCV(crc, mygen, k, myd)
  fi;
  FP;
  lost = false;
  META_ST(A_CRC(myslot), crc);
  if
  :: !lost -> printf("MSC: P%d stores the CRC of slot %d\n", me, myslot)
  :: lost -> printf("MSC: P%d: slot %d is no longer its own, no CRC stored\n", me, myslot)
  fi;
  crc = 0;
  /* @fp write.before_commit */
  FP;
  DRAIN(me);
  d_step {
    if
    :: OWNS ->
       sst[myslot] = S_READY; ready_tok[myslot] = mytok; outcome = O_STORED;
       printf("MSC: P%d commits slot %d gen %d key %d\n", me, myslot, mygen, k)
    :: else ->
       outcome = O_FENCED;
       printf("MSC: P%d commit CAS fails: slot %d is no longer its gen %d\n", me, myslot, mygen)
    fi
  }
#ifndef INPLACE
  ;
  /* layout 5: lost (LostSlot): the data slot goes back; committed: C2,
     @fn RegionImpl::SettleDataSlot MOVING(me) -> HELD, after READY */
  FP;
  if
  :: outcome == O_FENCED -> RELEASE_DATA(myd, mydg, MYDO)
  :: else ->
     CASD(myd, mydg, MYDO, D_MOVING, mydg, MYDO, D_HELD, dok);
     dok = false
  fi
#endif
}

/* @fn RegionImpl::Store, @fn RegionImpl::BeginWrite and the lease path. */
inline STORE(k) {
  outcome = O_NONE;
  FP;
  /* @fn RegionImpl::CheckWritable (@fn RegionImpl::StillRegistered) */
  if
  :: pst[me] != P_ACTIVE -> outcome = O_FENCED
  :: else ->
     FP;
     FIND(k, false);
     if
     :: fs != NONE && fst == S_READY -> outcome = O_DUP
     :: fs != NONE && fst != S_READY -> outcome = O_LOSTRACE
     :: fs == NONE ->
#ifndef OLD_PROTOCOL
        /* @fp write.before_claim (v2; v1 has the step, not the failpoint) */
#endif
        FP;
        CLAIM(k);
        if
#ifndef OLD_PROTOCOL
        :: !claimed && fs != NONE ->
           /* the untagged READY copy: repair its tag, answer duplicate */
           printf("MSC: P%d finds an untagged READY copy of key %d in slot %d\n", me, k, fs);
           FP;
           REPAIR_TAG(fs, fg, fo, k);
           outcome = O_DUP
#endif
        :: !claimed && fs == NONE -> outcome = O_FULL
        :: claimed ->
           assert(mygen < 16);
           mytok = TOK(me, myslot, mygen, k);
           printf("MSC: P%d claims slot %d gen %d for key %d\n", me, myslot, mygen, k);
           /* @fp write.after_claim */
           FP;
           lost = false;
#ifndef OLD_PROTOCOL
           /* v2: reclaimed before the claim CAS? Give the slot back. */
           if
           :: pst[me] != P_ACTIVE ->
              printf("MSC: P%d finds itself reclaimed after its claim\n", me);
              FP;
#ifndef INPLACE
              GIVE_DATA_BACK();
#endif
              RELEASE_OWNED();
              outcome = O_FENCED;
              lost = true
           :: else
           fi;
#endif
           if
           :: !lost ->
              META_ST(A_KEY(myslot), k);
              FP;
              if
              :: !lost -> META_ST(A_TAG(myslot), k)
              :: else
              fi;
              if
              :: !lost -> printf("MSC: P%d stores key %d and tag into slot %d\n", me, k, myslot)
              :: else
              fi;
              if
              :: lost -> outcome = O_FENCED  /* LostSlot: our slot was taken */
#ifndef INPLACE
                 ; GIVE_DATA_BACK()
#endif
              :: else
              fi
           :: else
           fi;
           FP;
           /* The seq_cst fence before the duplicate scan (ignoring tags). */
           DRAIN(me);
           s = 0;
           do
           :: lost || s >= NE -> break
           :: !lost && s < NE && s == myslot -> s++
           :: !lost && s < NE && s != myslot ->
              LOADW(s);
              if
              :: ws == S_READY || ws == S_WRITING ->
                 LD(me, A_KEY(s), t);
                 if
#ifdef OLD_PROTOCOL
                 :: t == k && (ws == S_READY || s < myslot) -> lost = true; outcome = O_LOSTRACE
#else
                 :: t == k && ws == S_READY -> lost = true; outcome = O_DUP; c = s
                 :: t == k && ws == S_WRITING && s < myslot -> lost = true; outcome = O_LOSTRACE
#endif
                 :: else
                 fi
              :: else
              fi;
              if
              :: !lost -> s++
              :: else
              fi
           od;
           t = 0;
           if
           :: lost && outcome != O_FENCED ->
              FP;
#ifndef INPLACE
              GIVE_DATA_BACK();
#endif
              RELEASE_OWNED();
#ifndef OLD_PROTOCOL
              /* A READY copy wins: answer duplicate, repairing its tag. */
              if
              :: outcome == O_DUP -> FP; REPAIR_TAG(c, wg, wo, k)
              :: else
              fi;
#endif
              c = 0
           :: lost && outcome == O_FENCED
           :: !lost ->
#ifndef INPLACE
              /* layout 5, D1/D2: the entry's data slot (unless it came with
                 one), after the duplicate check so a duplicate evicts
                 nothing; D3: registered still, then the entry's pointer
                 (ownership-checked like every metadata store) */
              if
              :: myd == NONE -> ACQUIRE_DATA()
              :: else
              fi;
              if
              :: myd == NONE ->
                 printf("MSC: P%d finds no data slot\n", me);
                 RELEASE_OWNED();
                 outcome = O_FULL; lost = true
              :: else ->
                 printf("MSC: P%d holds data slot %d for entry %d\n", me, myd, myslot);
                 FP;
                 if
                 :: pst[me] != P_ACTIVE ->
                    GIVE_DATA_BACK(); RELEASE_OWNED(); outcome = O_FENCED; lost = true
                 :: else ->
                    META_ST(A_DPTR(myslot), myd);
                    if
                    :: lost -> GIVE_DATA_BACK(); outcome = O_FENCED
                    :: else
                    fi
                 fi
              fi;
              if
              :: lost
              :: else ->
#endif
              /* The lease is open: fill, then commit or abort (the prober
                 always stores). */
              if
              :: /* Store / GPU path: copy (or DMA), commit with the
                    source's CRC */
                 FP;
                 printf("MSC: P%d copies its payload into slot %d\n", me, WSLOT);
                 ST(me, A_DATA(WSLOT), mytok);
                 /* @fp write.mid_copy */
                 FP;
                 COMMIT(true)
#ifndef NO_REGION_CRC
              :: me < NP ->  /* GPU path without gpu_crc: DMA, then
                                CommitWrite(nullptr) */
                 FP;
                 printf("MSC: P%d copies its payload into slot %d\n", me, WSLOT);
                 ST(me, A_DATA(WSLOT), mytok);
                 FP;
                 COMMIT(false)
#endif
              :: me < NP ->  /* @fn RegionImpl::AbortWrite (or a dropped lease) */
                 FP;
                 printf("MSC: P%d aborts its write of slot %d\n", me, myslot);
#ifndef INPLACE
                 GIVE_DATA_BACK();
#endif
                 RELEASE_OWNED();
                 outcome = O_NONE
              fi
#ifndef INPLACE
              fi
#endif
           fi;
           s = 0; wg = 0; wo = 0; ws = 0
        fi
     fi
  fi;
  fs = NONE; fg = 0; fo = 0; fst = 0; myslot = 0; mygen = 0; mytok = 0; claimed = false;
  lost = false; ok = false
#ifndef INPLACE
  ; myd = NONE; mydg = 0; vq = NONE; vqg = 0; vqo = 0
#endif
}

/* @fn RegionImpl::PinSlot (Dekker with TakeReadySlot: fetch_or, then the
 * state word; the evictor CASes, then reads the pins). */
inline PINSLOT(s, g, pinned) {
  pinned = false;
#ifndef OLD_PROTOCOL
  /* @fp pin.before_pin (v2; v1 has the step, not the failpoint) */
#endif
  FP;
  DRAIN(me);
  d_step { t = pin[s] & (1 << me); pin[s] = pin[s] | (1 << me) }
#ifndef OLD_PROTOCOL
  /* @fp pin.after_pin (v2; v1 has the step, not the failpoint) */
#endif
  FP;
#ifndef OLD_PROTOCOL
  /* v2: judged dead before our bit landed? Take it back if we set it. */
  if
  :: pst[me] != P_ACTIVE ->
     if
     :: t == 0 -> FP; DRAIN(me); d_step { pin[s] = pin[s] & ~(1 << me) }
     :: else
     fi;
     t = 0;
     goto pin_done
  :: else
  fi;
#endif
  t = 0;
  do
  :: LOADW(s);
     if
     :: wg != g -> break
     :: wg == g && ws == S_READY -> pinned = true; break
     :: wg == g && ws != S_READY && ws != S_EVICTING -> break
     :: wg == g && ws == S_EVICTING ->
        /* @fn RegionImpl::ParticipantActive */
        if
        :: pst[wo] != P_ACTIVE -> break
        :: pst[wo] == P_ACTIVE ->
           if
           :: skip    /* spin while the evictor decides */
           :: break   /* kEvictWait elapsed */
           fi
        fi
     fi
  od;
  wg = 0; wo = 0; ws = 0;
  if
  :: !pinned ->
     FP;
     DRAIN(me);
     d_step { pin[s] = pin[s] & ~(1 << me) }
  :: else
  fi;
pin_done:
  skip
}

/* @fn RegionImpl::ForceDropSlot: a CRC failure frees the block. */
inline FORCEDROP(s) {
#ifndef OLD_PROTOCOL
  printf("MSC: P%d: CRC check of slot %d fails, drops it\n", me, s);
  TAKE_AND_FREE(s, fg, fo, fst)
#else
  LD(me, A_TAG(s), t);
  FP;
  CASW(s, fg, fo, fst, fg, 0, S_FREE, ok);
  if
  :: ok -> printf("MSC: P%d drops slot %d (CRC failure)\n", me, s); FP; CLEARTAG(s, t)
  :: else
  fi;
  t = 0; ok = false
#endif
}

/* @fn RegionImpl::Load (keycheck) and @fn RegionImpl::BeginRead /
 * @fn RegionImpl::EndRead (no key re-check after the copy). */
inline LOAD(k) {
  hit = false;
  FP;
  FIND(k, true);
  if
  :: fs == NONE
  :: fs != NONE ->
     LD(me, A_CRC(fs), crc);
     FP;
     participant = (pst[me] == P_ACTIVE);
     pinned = false;
     if
     :: participant -> FP; PINSLOT(fs, fg, pinned)
     :: else
     fi;
     if
     :: participant && !pinned
     :: !participant || pinned ->
        FP;
#ifndef INPLACE
        /* layout 5: @fn RegionImpl::ReadDataSlot, the entry's data
           pointer, then the copy from it */
        LD(me, A_DPTR(fs), d);
        /* @fp read.after_data (a crash or pause here is one before the
           pointer load: no store between) */
#endif
        LD(me, A_DATA(RSLOT), got);  /* the copy */
        /* @fp read.mid_copy */
        FP;
        /* @fn SameReadableBlock */
        d_step {
          unchanged = (sgen[fs] == fg && (sst[fs] == S_READY || sst[fs] == S_EVICTING));
          snap = ready_tok[fs]
        }
        if
        :: keycheck -> LD(me, A_KEY(fs), t); unchanged = unchanged && (t == k); t = 0
        :: !keycheck
        fi;
        if
        :: pinned ->
           FP;
           /* @fn RegionImpl::UnpinSlot */
           if
           :: pst[me] == P_ACTIVE -> DRAIN(me); d_step { pin[fs] = pin[fs] & ~(1 << me) }
           :: else
           fi
        :: else
        fi;
        if
        :: !unchanged -> printf("MSC: P%d misses key %d: slot %d changed\n", me, k, fs)
        :: unchanged && CRCV(got, fg, k, d) != crc -> FP; FORCEDROP(fs)
        :: unchanged && CRCV(got, fg, k, d) == crc ->
           printf("MSC: P%d hit key %d slot %d gen %d: bytes of P%d gen %d key %d\n",
                  me, k, fs, fg, TOKW(got), TOKG(got), TOKKEY(got));
           /* The property: a hit is the bytes the current owner stored for
              the key asked. */
#ifndef CHECK_SETTLE_ONLY
           assert(got == snap && TOKKEY(got) == k);
#endif
           hit = true
        fi
     fi
  fi;
  fs = NONE; fg = 0; fo = 0; fst = 0; got = 0; crc = 0; snap = 0; unchanged = false;
  participant = false; pinned = false
#ifndef INPLACE
  ; d = 0
#endif
}

#ifdef INPLACE
#define OPLOCALS \
  byte k, s, t, c, start, wg, wo, ws, fs = NONE, fg, fo, fst, myslot, mygen, outcome; \
  bool ok, claimed, lost, pinned, participant, unchanged, hit, keycheck, mayfail; \
  short got, crc, snap, mytok
#else
#define OPLOCALS \
  byte k, s, t, c, start, wg, wo, ws, fs = NONE, fg, fo, fst, myslot, mygen, outcome; \
  bool ok, claimed, lost, pinned, participant, unchanged, hit, keycheck, mayfail; \
  int got, crc; short snap, mytok; \
  byte d, dg, dgo, xg, xo, xst, myd = NONE, mydg, vq = NONE, vqg, vqo; bool dok
#endif

proctype Worker(byte me) {
  OPLOCALS;
  byte op;
  mayfail = (crashmask >> me) & 1;
  do
  :: op < (me == 0 -> OPS0 : OPS) ->
     op++;
#ifdef P0OP
     /* A case with fixed roles: worker i does operation PiOP (1 Store, 2
        Load, 3 Drop) of key PiKEY. */
     k = ROLEKEY;
     if
     :: ROLEOP == 1 -> STORE(k)
     :: ROLEOP == 2 -> keycheck = true; LOAD(k)
#ifdef LEASE_WORD
     :: ROLEOP == 3 -> DROP(k)
#endif
     fi;
#else
     select (k : 1 .. NK);
     if
     :: STORE(k)
     :: keycheck = true; LOAD(k)
#ifdef OLD_PROTOCOL
     :: keycheck = false; LOAD(k)  /* v1 EndRead: no key re-check */
#endif
     fi;
#endif
     k = 0; outcome = O_NONE; hit = false; keycheck = false
  :: else -> break
  od;
  goto finish;
crashed_:
  printf("MSC: P%d crashes\n", me);
  crashed[me] = true;
finish:
  ndone++
}

/* Judged dead: crashed, or (pause budget) paused, at any step. Its store
 * buffer has drained by then: a buffer drains within microseconds, the
 * liveness timeout is at least 100 ms of an unchanged heartbeat. (A late
 * DMA of a paused writer is its payload store after it resumes.) */
#define CANRECLAIM(i) \
  ((i) < NP && sb[(i) % NBUF].n == 0 && \
   ((pst[i] == P_ACTIVE && (crashed[i] || pause_budget > 0)) || pst[i] == P_RECLAIMING))
/* Still to be reclaimed once every worker has stopped. */
#define MUSTRECLAIM(i) \
  ((i) < NP && (pst[i] == P_RECLAIMING || (pst[i] == P_ACTIVE && crashed[i])))
#define RFP \
  if \
  :: rcrash_budget > 0 -> rcrash_budget--; printf("MSC: reclaimer dies mid-sweep\n"); goto r_restart \
  :: true \
  fi

/* @fn RegionImpl::SweepParticipant */
inline SWEEP(i) {
  s = 0;
  do
  :: s < NE ->
     LOADW(s);
     if
     :: ws == S_WRITING && wo == i ->
#ifdef OLD_PROTOCOL
        LD(me, A_TAG(s), t);
        RFP;
        CASW(s, wg, wo, ws, wg, 0, S_FREE, ok);
        if
        :: ok -> printf("MSC: reclaimer frees slot %d (P%d was writing it)\n", s, i); CLEARTAG(s, t)
        :: else
        fi
#else
        RFP;
        TAKE_AND_FREE(s, wg, wo, ws)
#endif
     :: ws == S_EVICTING && wo == i ->
#ifdef OLD_PROTOCOL
        CASW(s, wg, wo, ws, wg, i, S_READY, ok)
#else
        /* back to READY with the writer the slot recorded */
        CASW(s, wg, wo, ws, wg, TOKW(ready_tok[s]), S_READY, ok)
#endif
     :: else
     fi;
     t = 0; ok = false; wg = 0; wo = 0; ws = 0;
     RFP;
     if
     :: pin[s] & (1 << i) -> d_step { pin[s] = pin[s] & ~(1 << i) }
     :: else
     fi;
     /* @fp reclaim.mid_sweep */
     RFP;
     s++
  :: else -> break
  od;
  s = 0
#ifndef INPLACE
  ;
  /* layout 5: @fn RegionImpl::SettleOrphanedData, its MOVING data slots
     (after the entries: a victim it held EVICTING is READY again) */
  do
  :: s < NSLOT ->
     if
#ifdef LEASE_WORD
     :: true -> RFP; ORPHAN_DATA_SWEEP(s)
#else
     :: dsst[s] == D_MOVING && dsown[s] == i -> RFP; RESOLVE_MOVING(s, i)
#endif
     :: else
     fi;
     s++
  :: else -> break
  od;
  s = 0
#endif
}

#ifndef OLD_PROTOCOL
/* Orphans (v2): a WRITING/EVICTING slot or a pin bit whose owner's entry is
 * not alive (FREE: reclaimed before its claim or pin landed). */
#define DEADBITS ((pst[0] == P_FREE) * 1 + (pst[1] == P_FREE) * 2 + (pst[2] == P_FREE) * 4)
#define ORPHAN(s) \
  ((s) < NE && ((((sst[s] == S_WRITING || sst[s] == S_EVICTING) && pst[sown[s]] == P_FREE)) || \
                   (pin[s] & DEADBITS) != 0))

/* @fn RegionImpl::SweepOrphans, for slot s. The engine acts on a word only
 * after seeing it unchanged for a liveness timeout; the model may act at
 * any moment after the owner stopped being alive (more behaviours). */
inline ORPHAN_SWEEP(s) {
  LOADW(s);
  if
  :: (ws == S_WRITING || ws == S_EVICTING) && pst[wo] == P_FREE ->
     printf("MSC: orphan sweep: slot %d's owner P%d is not alive\n", s, wo);
     if
     :: ws == S_EVICTING -> CASW(s, wg, wo, ws, wg, TOKW(ready_tok[s]), S_READY, ok)
     :: ws == S_WRITING -> TAKE_AND_FREE(s, wg, wo, ws)
     fi
  :: else
  fi;
  d_step {
    t = pin[s] & DEADBITS;
    pin[s] = pin[s] & ~t;
    t = 0
  }
  wg = 0; wo = 0; ws = 0; ok = false
}

#ifndef INPLACE
/* Orphan data slots (layout 5): MOVING for an owner that is not alive (a
 * mover or writer reclaimed before it acted). */
#ifndef LEASE_WORD
#define ORPHAN_D(dd) ((dd) < NSLOT && dsst[dd] == D_MOVING && pst[dsown[dd]] == P_FREE)

/* @fn RegionImpl::SweepOrphans, for data slot dd. */
inline ORPHAN_DATA_SWEEP(dd) {
  if
  :: dsst[dd] == D_MOVING && pst[dsown[dd]] == P_FREE -> RESOLVE_MOVING(dd, NONE)
  :: else
  fi
}
#else
/* LEASE_WORD: a data word whose lease (entry e, generation g) is over (e
 * FREE or at another generation) is freed; MOVING of a lease that is READY
 * (its writer died between READY and settle) goes HELD. No entry scan. */
#define LEASE_OVER(dd) (sst[dsown[dd]] == S_FREE || sgen[dsown[dd]] != dsgen[dd])
#define ORPHAN_D(dd) ((dd) < NSLOT && dsst[dd] != D_FREE && \
  (LEASE_OVER(dd) || (dsst[dd] == D_MOVING && sst[dsown[dd]] == S_READY)))
inline ORPHAN_DATA_SWEEP(dd) {
  LOADD(dd);
  if
  :: xst != D_FREE && (sst[xo] == S_FREE || sgen[xo] != xg) ->
     CASD(dd, xg, xo, xst, 0, 0, D_FREE, dok);
     if
     :: dok -> printf("MSC: P%d: data slot %d's lease (entry %d gen %d) is over: freed\n", me, dd, xo, xg)
     :: else
     fi
  :: xst == D_MOVING && sst[xo] == S_READY && sgen[xo] == xg ->
     CASD(dd, xg, xo, xst, xg, xo, D_HELD, dok)
  :: else
  fi;
  dok = false; xg = 0; xo = 0; xst = 0
}
#endif
#endif
#endif

/* The heartbeat thread of a live participant: @fn RegionImpl::ReapDead
 * judges, @fn RegionImpl::TryReclaim reclaims. At the end (every worker
 * finished or crashed, every store buffer drained) it checks that every
 * slot settled and probes every key. */
proctype Reclaimer() {
  OPLOCALS;
  byte i, me = R;
r_restart:
  do
  :: CANRECLAIM(0) -> i = 0; goto reclaim
  :: CANRECLAIM(1) -> i = 1; goto reclaim
  :: CANRECLAIM(2) -> i = 2; goto reclaim
#ifndef OLD_PROTOCOL
  :: ORPHAN(0) -> s = 0; ORPHAN_SWEEP(s); s = 0
  :: ORPHAN(1) -> s = 1; ORPHAN_SWEEP(s); s = 0
#endif
#ifndef INPLACE
  :: ORPHAN(2) -> s = 2; ORPHAN_SWEEP(s); s = 0
  :: ORPHAN(3) -> s = 3; ORPHAN_SWEEP(s); s = 0
  :: ORPHAN_D(0) -> s = 0; ORPHAN_DATA_SWEEP(s); s = 0
  :: ORPHAN_D(1) -> s = 1; ORPHAN_DATA_SWEEP(s); s = 0
#endif
  :: ndone == NP && !MUSTRECLAIM(0) && !MUSTRECLAIM(1) && !MUSTRECLAIM(2) -> break
  od;
  goto finale;
reclaim:
  skip;
  /* The liveness judgement and the CAS ACTIVE -> RECLAIMING. */
  d_step {
    if
    :: pst[i] == P_ACTIVE ->
       pst[i] = P_RECLAIMING;
       if
       :: !crashed[i] -> pause_budget--; printf("MSC: P%d paused past the liveness timeout\n", i)
       :: else
       fi;
       printf("MSC: reclaimer reclaims P%d\n", i);
       ok = true
    :: pst[i] == P_RECLAIMING -> ok = true  /* a dead reclaimer's sweep: taken over */
    :: else -> ok = false
    fi
  }
  if
  :: ok -> SWEEP(i); pst[i] = P_FREE
  :: else
  fi;
  ok = false; i = 0;
  goto r_restart;

finale:
  /* Quiescence: nothing runs any more but this participant. */
  (sb[0].n == 0 && sb[1].n == 0 && sb[NBUF - 1].n == 0);
#ifndef OLD_PROTOCOL
  /* The stall timeout has passed for every orphan left. */
  s = 0;
  do
  :: s < NE -> ORPHAN_SWEEP(s); s++
  :: else -> break
  od;
#endif
#ifndef INPLACE
  s = 0;
  do
  :: s < NSLOT -> ORPHAN_DATA_SWEEP(s); s++
  :: else -> break
  od;
#endif
#ifndef CHECK_READS_ONLY
  /* After crashes every slot becomes FREE or READY again. */
  s = 0;
  do
  :: s < NE ->
     assert(sst[s] == S_FREE || sst[s] == S_READY);
     s++
  :: else -> break
  od;
#ifndef INPLACE
  /* Layout 5: every data slot settles to FREE or HELD (no MOVING word is
     left); a HELD one is named by a READY entry (no leak); a READY entry
     whose block reads back (its CRC matches the bytes it names) names a
     HELD data slot (no READY entry is left naming a freed slot). */
  s = 0;
  do
  :: s < NSLOT ->
     assert(dsst[s] == D_FREE || dsst[s] == D_HELD);
     t = 0;
     do
     :: t < NE && !(sst[t] == S_READY && mem[A_DPTR(t)] == s) -> t++
     :: else -> break
     od;
#ifdef LEASE_WORD
     assert(dsst[s] != D_HELD || (sst[dsown[s]] == S_READY && sgen[dsown[s]] == dsgen[s]));
#else
     assert(dsst[s] != D_HELD || t < NE);  /* no leak */
#endif
     t = 0;
     s++
  :: else -> break
  od;
  s = 0;
  do
  :: s < NE ->
     assert(sst[s] != S_READY ||
            CRCV(mem[A_DATA(mem[A_DPTR(s)])], sgen[s], mem[A_KEY(s)], mem[A_DPTR(s)]) != mem[A_CRC(s)] ||
#ifdef LEASE_WORD
            (dsown[mem[A_DPTR(s)]] == s && dsgen[mem[A_DPTR(s)]] == sgen[s] &&
#else
            (true &&
#endif
             dsst[mem[A_DPTR(s)]] == D_HELD));
     s++
  :: else -> break
  od;
#endif
#endif
#ifndef INPLACE
  /* Layout 5: read every key as the workers left it (each READY block is
     read once before a store of the probe can evict it: with one data slot
     the probe's first store would; the read property applies). */
  k = 1;
  do
  :: k <= NK -> keycheck = true; LOAD(k); hit = false; k++
  :: else -> break
  od;
#endif
#ifndef CHECK_READS_ONLY
  /* Every key stays storable: a store, then a load, hits within three
     rounds (a round may end in repairing a tag, dropping a block a zombie
     damaged, or evicting). */
  k = 1;
  do
  :: k <= NK ->
     c = 0;
     do
     :: c < 3 ->
        STORE(k);
        keycheck = true;
        LOAD(k);
        if
        :: hit -> break
        :: else -> c++
        fi
     :: else -> break
     od;
     printf("MSC: probe of key %d: hit %d\n", k, hit);
     assert(hit);
     k++
  :: else -> break
  od;
#endif
  goto end_done;
crashed_:  /* the reclaimer never crashes in an operation (FP needs the label) */
end_done:
  skip
}

init {
  byte i;
  atomic {
#if CRASHES >= 2
    crashmask = (1 << NP) - 1;
#elif CRASHES == 1
    select (i : 0 .. NP - 1);
    crashmask = 1 << i;
#endif
    i = 0;
    do
    :: i < NPROC -> pst[i] = P_ACTIVE; i++
    :: else -> break
    od;
#if !defined(INPLACE) && !defined(NO_PRELOAD)
    /* Layout 5: entry 0 holds a READY block of key NK in data slot 0 that
       a live participant (R) stored before, so a Store may have to move
       that data slot while a reader copies it. */
    sst[0] = S_READY; sgen[0] = 1; sown[0] = R;
    mem[A_KEY(0)] = NK; mem[A_TAG(0)] = NK; mem[A_DPTR(0)] = 0;
    mem[A_DATA(0)] = TOK(R, 0, 1, NK);
    mem[A_CRC(0)] = CRCV(TOK(R, 0, 1, NK), 1, NK, 0);
    ready_tok[0] = TOK(R, 0, 1, NK);
#ifdef LEASE_WORD
    dsst[0] = D_HELD; dsgen[0] = 1; dsown[0] = 0;
#else
    dsst[0] = D_HELD; dsgen[0] = 0; dsown[0] = R;
#endif
#endif
    i = 0;
    do
    :: i < NBUF -> run Flusher(i); i++
    :: else -> break
    od;
    i = 0;
    do
    :: i < NP -> run Worker(i); i++
    :: else -> break
    od;
    i = 0;
    run Reclaimer()
  }
}
