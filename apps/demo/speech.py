"""Speech for the Live reply tab: each sentence the server streams is spoken as it arrives, as the avatar would.

The server streams a livestream reply sentence by sentence (``POST /v1/livestream/reply`` with ``stream: true``);
each sentence is synthesised here with Debian's ``espeak-ng`` (https://github.com/espeak-ng/espeak-ng) at the
speech rate (words per second, the server's ``speech_rate_wps``) and handed to the page as an ``<audio>`` element
(``sentence_audio_html``). In the browser ``PLAYER_JS`` plays the sentences one after the other, each once, and
records when each arm's first sentence starts to sound, in ms after Ask (``window.livethinkSpeech``: per sentence
also when its element appeared in the page, ``queued``, and when the player started it, ``started``).
"""

from __future__ import annotations

import base64
import html
import io
import shutil
import subprocess
import wave
from dataclasses import dataclass

ESPEAK = "espeak-ng"
VOICE = "en-us"
DEFAULT_WPS = 2.5  # the server's default speech rate (speech.speech_rate_wps)
SYNTH_TIMEOUT_S = 20.0


class SpeechError(RuntimeError):
    """``espeak-ng`` is missing or could not speak a sentence."""


def espeak_path() -> str | None:
    """Where ``espeak-ng`` is, or None when it is not installed (``make demo`` / ``make test`` install it)."""
    return shutil.which(ESPEAK)


def synthesize(text: str, words_per_s: float = DEFAULT_WPS, voice: str = VOICE) -> bytes:
    """``text`` spoken by ``espeak-ng`` at ``words_per_s`` (its ``-s`` is words per minute): WAV bytes."""
    exe = espeak_path()
    if exe is None:
        raise SpeechError(f"{ESPEAK} is not installed (Debian: apt-get install {ESPEAK}); the demo cannot speak")
    wpm = max(80, min(450, round(words_per_s * 60)))  # espeak-ng's accepted range
    try:
        done = subprocess.run([exe, "-v", voice, "-s", str(wpm), "--stdout", text], capture_output=True,
                              timeout=SYNTH_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise SpeechError(f"{ESPEAK} took more than {SYNTH_TIMEOUT_S:g} s on one sentence") from None
    if done.returncode != 0 or not done.stdout.startswith(b"RIFF"):
        raise SpeechError(f"{ESPEAK} failed (exit {done.returncode}): {done.stderr.decode(errors='replace')[:200]}")
    return _sized(done.stdout)


def _sized(data: bytes) -> bytes:
    """A WAV written to a pipe carries placeholder sizes (the writer cannot seek back): set the RIFF and ``data``
    chunk sizes from the bytes there are."""
    at = data.find(b"data", 12)
    if at < 0:
        raise SpeechError(f"{ESPEAK} wrote a WAV without a data chunk")
    out = bytearray(data)
    out[4:8] = (len(data) - 8).to_bytes(4, "little")
    out[at + 4 : at + 8] = (len(data) - at - 8).to_bytes(4, "little")
    return bytes(out)


def wav_seconds(data: bytes) -> float:
    """How long a WAV plays."""
    with wave.open(io.BytesIO(data)) as w:
        return w.getnframes() / float(w.getframerate())


@dataclass(frozen=True)
class SpokenSentence:
    """One sentence as the page gets it: its text, its audio and when it was ready (ms after Ask, the demo's
    clock)."""

    key: str  # unique per request and sentence: the browser plays each key once
    text: str
    wav: bytes
    ready_ms: float


def sentence_audio_html(side: str, sentences: list[SpokenSentence]) -> str:
    """The hidden ``<audio>`` elements of one arm's sentences so far (``PLAYER_JS`` queues each key once) and a
    visible line of what is being said."""
    parts = []
    for s in sentences:
        src = "data:audio/wav;base64," + base64.b64encode(s.wav).decode("ascii")
        parts.append(f'<audio data-lt-sentence data-arm="{side}" data-key="{html.escape(s.key)}" '
                     f'preload="auto" src="{src}"></audio>')
    if sentences:
        first = sentences[0].ready_ms
        spoken = sum(wav_seconds(s.wav) for s in sentences)
        parts.append(f"<p>🔊 {len(sentences)} sentence(s) spoken ({spoken:.1f} s of speech); the first was ready "
                     f"{first:,.0f} ms after Ask.</p>")
    return "\n".join(parts)


# The page's player: a queue over the sentences' audio, each key played once, one at a time (a re-render of the
# HTML that holds them neither replays nor cuts a sentence: the player plays its own Audio copy); Ask stops what
# is being said and drops what was still to come.
PLAYER_JS = """
() => {
  if (window.livethinkSpeech) return;
  const S = window.livethinkSpeech = {askAt: null, firstSound: {}, played: [], errors: []};
  const queued = new Set(), queue = [];
  let playing = null;
  document.addEventListener('click', (e) => {
    if (!(e.target.closest && e.target.closest('#ask'))) return;
    S.askAt = performance.now(); S.firstSound = {}; S.played = [];
    queue.length = 0;  // a new question interrupts the answer being spoken
    if (playing) { playing.pause(); playing = null; }
  }, true);
  function next() {
    if (playing || !queue.length) return;
    const item = queue.shift();
    const audio = new Audio(item.src);
    playing = audio;
    const started = S.askAt === null ? null : performance.now() - S.askAt;
    audio.addEventListener('playing', () => {
      const at = S.askAt === null ? null : performance.now() - S.askAt;
      if (!(item.arm in S.firstSound)) S.firstSound[item.arm] = at;
      S.played.push({arm: item.arm, key: item.key, at: at, queued: item.queued, started: started});
    }, {once: true});
    const done = () => { if (playing === audio) { playing = null; next(); } };
    audio.addEventListener('ended', done, {once: true});
    audio.addEventListener('error', () => { S.errors.push(item.key); done(); }, {once: true});
    audio.play().catch((err) => { S.errors.push(item.key + ': ' + err); done(); });
  }
  new MutationObserver(() => {
    document.querySelectorAll('audio[data-lt-sentence]').forEach((a) => {
      const key = a.dataset.key;
      if (queued.has(key)) return;
      queued.add(key);
      queue.push({key: key, arm: a.dataset.arm, src: a.getAttribute('src'),
                  queued: S.askAt === null ? null : performance.now() - S.askAt});
    });
    next();
  }).observe(document.body, {childList: true, subtree: true});
}
"""
