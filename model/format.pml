/* Spin model of format-or-attach (src/region/open.cc; docs/region_format.md
 * "Format protocol"; docs/model.md).
 *
 * NO openers run @fn Region::Open -> @fn RegionImpl::FormatOrWait on one
 * blank region. Any may crash at any step (CRASHES of them), and any may
 * pause at any step: time is not modelled, so a waiter may judge a format
 * stalled whenever (format_lock, format_progress) looked the same on two of
 * its polls, which is what a pause past format_stall_ns looks like to it.
 *
 * Words: magic; format_lock = nonce * 2 + done bit; format_progress; the
 * header (0 = blank, else the nonce of the format that wrote it: the header
 * CRC makes a header intact or not, never half); the config JSON (same);
 * the metadata as NCHUNK chunks (0 = zero, 1 = written by an attached
 * participant).
 *
 * Properties:
 *  - an opener attaches only to a complete format (header and JSON written,
 *    every metadata chunk zeroed or live);
 *  - every opener ends (attached, or an error), no deadlock;
 *  - FORMAT_LIMIT (the known limit in docs/region_format.md): no formatter
 *    writes into the region after some participant attached. Expected to
 *    fail: a formatter paused between its still-ours check and its write.
 */

#ifndef NO
#define NO 3
#endif
#ifndef NCHUNK
#define NCHUNK 2
#endif
#ifndef CRASHES
#define CRASHES 1
#endif
#ifndef CLAIMS
#define CLAIMS 2  /* format attempts per opener (each with a fresh nonce) */
#endif

#define NONE 255

bool magic;
byte lock;      /* nonce * 2 + done */
byte progress;
byte header;
byte json;
byte meta[NCHUNK];
byte nattached;
byte ndone;
byte crashmask;

#define FP \
  if \
  :: mayfail -> goto crashed_ \
  :: true \
  fi

/* A write by the formatter into the region. */
#ifdef FORMAT_LIMIT
#define FORMAT_WRITE assert(nattached == 0)
#else
#define FORMAT_WRITE skip
#endif

proctype Opener(byte me) {
  byte seen_lock = NONE, seen_prog = NONE, l, p, nonce, claims, c;
  bool stalled, claim, ok, mayfail, busy;
  mayfail = (crashmask >> me) & 1;
loop:
  /* @fn RegionImpl::FormatOrWait */
  FP;
  if
  :: magic -> goto attach_
  :: else
  fi;
  l = lock;
  FP;
  p = progress;
  FP;
  if
  :: l != seen_lock || p != seen_prog -> seen_lock = l; seen_prog = p; stalled = false
  :: else ->
     if
     :: stalled = true;  /* format_stall_ns passed without a change */
        printf("MSC: O%d sees the format stalled\n", me)
     :: stalled = false
     fi
  fi;
  claim = false;
  if
  :: header != 0 ->  /* header intact */
     if
     :: l == 0 -> goto error  /* magic damaged, header intact: kCorruption */
     :: l != 0 && ((l & 1) || stalled) ->
        /* complete: publish the magic on the formatter's behalf */
        FP;
        atomic { if :: lock == l && !(l & 1) -> lock = l | 1 :: else fi }
        FP;
        magic = true;
        goto loop
     :: else
     fi
  :: header == 0 && l == 0 ->
     if
     :: json != 0 -> goto error  /* not blank: foreign bytes */
     :: else -> claim = true
     fi
  :: header == 0 && l != 0 && stalled -> claim = true  /* take over */
  :: else
  fi;
  if
  :: claim && claims < CLAIMS ->
     claims++;
     nonce = (me * CLAIMS + claims) * 2;
     FP;
     atomic {
       if
       :: lock == l -> lock = nonce; ok = true
       :: else -> ok = false
       fi
     }
     if
     :: ok -> printf("MSC: O%d claims the format lock (nonce %d)\n", me, nonce); goto format
     :: else -> seen_lock = NONE; goto loop
     fi
  :: claim && claims >= CLAIMS -> goto error  /* bound of the model */
  :: !claim ->
     if
     :: goto loop          /* wait */
     :: goto error         /* format_wait_ns passed: kBusy */
     fi
  fi;

format:
  /* @fn RegionImpl::Format */
  /* @fp format.after_lock */
  FP;
  c = 0;
  busy = false;
  do
  :: c < NCHUNK ->
     if
     :: lock != nonce -> busy = true; break  /* taken over */
     :: else
     fi;
     FP;
     printf("MSC: O%d zeroes metadata chunk %d\n", me, c);
     FORMAT_WRITE;
     meta[c] = 0;
     FP;
     progress++;
     /* @fp format.mid_zero */
     FP;
     c++
  :: else -> break
  od;
  c = 0;
  if
  :: busy -> seen_lock = NONE; goto loop
  :: else
  fi;
  if
  :: lock != nonce -> seen_lock = NONE; goto loop
  :: else
  fi;
  FP;
  FORMAT_WRITE;
  json = nonce;
  FP;
  printf("MSC: O%d writes the header\n", me);
  FORMAT_WRITE;
  header = nonce;
  FP;
  atomic {
    if
    :: lock == nonce -> lock = nonce | 1; ok = true
    :: else -> ok = false
    fi
  }
  if
  :: !ok -> seen_lock = NONE; goto loop
  :: else
  fi;
  FP;
  magic = true;
  printf("MSC: O%d publishes the magic\n", me);
  /* falls through: Format returned OK */

attach_:
  /* @fn RegionImpl::Validate: the header CRC, the JSON. */
  FP;
  assert(header != 0 && json != 0);
  c = 0;
  do
  :: c < NCHUNK -> assert(meta[c] == 0 || meta[c] == 1); c++
  :: else -> break
  od;
  c = 0;
  printf("MSC: O%d attaches\n", me);
  nattached++;
  /* The participant uses the region: its metadata is live. */
  meta[me % NCHUNK] = 1;
  goto finish;
error:
  goto finish;
crashed_:
  skip;
finish:
  ndone++
}

init {
  byte i;
  atomic {
    /* A region file that was used before: metadata not zero (the formatter
       zeroes it), first 4 KiB zero. */
    i = 0;
    do
    :: i < NCHUNK -> meta[i] = 2; i++
    :: else -> break
    od;
#if CRASHES >= 2
    crashmask = (1 << NO) - 1;
#elif CRASHES == 1
    select (i : 0 .. NO - 1);
    crashmask = 1 << i;
#endif
    i = 0;
    do
    :: i < NO -> run Opener(i); i++
    :: else -> break
    od;
    i = 0
  }
}
