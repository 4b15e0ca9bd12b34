/* Per-host caches of lines over non-coherent shared memory (included by
 * coherence.pml; docs/model.md, "Software mode").
 *
 * mem[] is shared memory, one int per word. Words are grouped into lines
 * (wline[a], lines are contiguous runs lfirst[l] .. lfirst[l]+lnum[l]-1).
 * Host h sees memory through its own cache: cw[h*NW + a] is its copy of
 * word a, cst[h*NL + l] the line's state (I_ invalid, C_ clean, D_ dirty).
 *  - a load of an invalid line fills the whole line from memory, then reads
 *    the copy; a store fills it too (write-allocate) and makes it dirty;
 *  - a dirty line reaches memory whole (every word of the line, so a host's
 *    stale copy of a word clobbers what another host stored there) on FLUSH,
 *    on INVAL, and at any moment (the Cache process of its host, which also
 *    runs after the host's process crashed or while it is paused);
 *  - INVAL drops the line (writing a dirty copy back first, as CLFLUSHOPT
 *    does); a clean line is refreshed only then (-DCLEAN_DROPS also lets a
 *    cache drop a clean line at any moment: the caches of the hosts in the
 *    bit mask DROP_HOSTS, default all three);
 *  - there are no atomic read-modify-writes: every step of the protocol is a
 *    load or a store of one host's cache.
 * A FLUSH or INVAL here is the visibility layer's call followed by its fence
 * (sfence after Flush, mfence after Invalidate): the model treats the pair as
 * one step, so a missing fence is not modelled (docs/model.md).
 *
 * Sites: every FLUSH and INVAL carries a site number; -DDROP=n turns site n
 * into a no-op (the mutants of scripts/model-check.sh).
 */

#ifndef DROP
#define DROP 0
#endif

#define I_ 0
#define C_ 1
#define D_ 2

int mem[NW];
int cw[NH * NW];
byte cst[NH * NL];
byte wline[NW];
byte lfirst[NL];
byte lnum[NL];
byte ci;  /* scratch for d_steps; always 0 outside them */

inline FILL(h, l) {
  if
  :: cst[(h) * NL + (l)] == I_ ->
     ci = 0;
     do
     :: ci < lnum[l] -> cw[(h) * NW + lfirst[l] + ci] = mem[lfirst[l] + ci]; ci++
     :: else -> break
     od;
     ci = 0;
     cst[(h) * NL + (l)] = C_
  :: else
  fi
}

inline WRITEBACK(h, l) {
  ci = 0;
  do
  :: ci < lnum[l] -> mem[lfirst[l] + ci] = cw[(h) * NW + lfirst[l] + ci]; ci++
  :: else -> break
  od;
  ci = 0;
  cst[(h) * NL + (l)] = C_
}

/* Load of word a by host h. */
inline LD(h, a, dst) {
  d_step { FILL(h, wline[a]); dst = cw[(h) * NW + (a)] }
}

/* Store of word a by host h: its cache only. */
inline ST(h, a, v) {
  d_step { FILL(h, wline[a]); cw[(h) * NW + (a)] = v; cst[(h) * NL + wline[a]] = D_ }
}

/* Visibility::Flush + StoreFence of line l at site `site`. */
inline FLUSH(h, l, site) {
  d_step {
    if
    :: DROP != site && cst[(h) * NL + (l)] == D_ -> WRITEBACK(h, l)
    :: else
    fi
  }
}

/* Visibility::Invalidate + FullFence of line l at site `site`. */
inline INVAL(h, l, site) {
  d_step {
    if
    :: DROP != site ->
       if
       :: cst[(h) * NL + (l)] == D_ -> WRITEBACK(h, l)
       :: else
       fi;
       cst[(h) * NL + (l)] = I_
    :: else
    fi
  }
}

/* Host h's cache on its own: writes back any dirty line, whole, at any
 * moment (also while h's process is paused or after it crashed). */
#define CACHE_WB(n) :: d_step { n < NL && cst[h * NL + n] == D_ -> WRITEBACK(h, n) }
#ifdef CLEAN_DROPS
#ifndef DROP_HOSTS
#define DROP_HOSTS 7
#endif
#define CACHE_DROP(n) \
  :: d_step { ((DROP_HOSTS >> h) & 1) && n < NL && cst[h * NL + n] == C_ -> cst[h * NL + n] = I_ }
#else
#define CACHE_DROP(n)
#endif
proctype Cache(byte h) {
end_cache:
  do
  CACHE_WB(0) CACHE_WB(1) CACHE_WB(2) CACHE_WB(3) CACHE_WB(4) CACHE_WB(5) CACHE_WB(6)
  CACHE_DROP(0) CACHE_DROP(1) CACHE_DROP(2) CACHE_DROP(3) CACHE_DROP(4) CACHE_DROP(5)
  CACHE_DROP(6)
  od
}

/* No dirty line in host h's cache. */
#define DRAINED(h) \
  (cst[(h) * NL + 0] != D_ && (NL < 2 || cst[(h) * NL + 1] != D_) && \
   (NL < 3 || cst[(h) * NL + 2] != D_) && (NL < 4 || cst[(h) * NL + 3] != D_) && \
   (NL < 5 || cst[(h) * NL + 4] != D_) && (NL < 6 || cst[(h) * NL + 5] != D_) && \
   (NL < 7 || cst[(h) * NL + 6] != D_))
