"""POP909: 909 pop songs arranged for piano, as Standard MIDI files (docs/guides/preprocessing.md).

Reference:
    Wang et al. 2020, "POP909: A Pop-song Dataset for Music Arrangement Generation" (MIT license).
"""

import contextlib
import os
import pathlib
import time

from keras_attn.checks import require
from keras_attn.datasets import _files

NUM_SONGS = 909


# {song "NNN": sha256} and the license's, from `pop909_sha256.txt` beside this module.
_HASHES = pathlib.Path(__file__).with_name("pop909_sha256.txt").read_text().splitlines()
SHA256 = dict(line.split() for line in _HASHES if line.strip() and not line.startswith("#"))
LICENSE_SHA256 = SHA256.pop("LICENSE")

# The repository at a fixed commit (its master of 2020-08-28; the songs were
# last changed in its commit efa0bce0 of 2020-07-26). BASE_URL + "POP909/" +
# "001/001.mid" is a song.
BASE_URL = (
    "https://raw.githubusercontent.com/music-x-lab/POP909-Dataset/"
    "d83e6edba6872a704f5d3b8b32f5cb540088dae6/"
)


def _song_names(songs):
    if songs is None:
        return sorted(SHA256)
    songs = (songs,) if isinstance(songs, (int, str)) else list(songs)
    require(bool(songs), "songs", songs, "at least one POP909 song, or None for all")
    expected = f"a POP909 song number from 1 to {NUM_SONGS} (or its three digits, e.g. '007')"
    names = []
    for song in songs:
        name = f"{song:03d}" if isinstance(song, int) and not isinstance(song, bool) else str(song)
        require(name in SHA256, "song", song, expected)
        names.append(name)
    return sorted(set(names))


def fetch(songs=None, data_dir=None, cache_dir=None, base_url=None):
    """The folder holding POP909's `NNN/NNN.mid` files, each checked.

    Args:
        songs: None for all 909 songs, or numbers (1 .. 909) or three-digit strings (`"001"`).
        data_dir: an offline folder holding `pop909/POP909/NNN/NNN.mid` (else `$KERAS_ATTN_DATA`).
        cache_dir: the Keras cache folder (default `$KERAS_HOME` or `~/.keras`).
        base_url: the repository's root to download from (default `BASE_URL`).

    Returns:
        the `POP909` folder (str) in which every requested `NNN/NNN.mid` has its sha256 checked.

    Raises:
        ValueError: an unknown song, or a file with another sha256.
        FileNotFoundError: the offline folder lacks a song.
        OSError: a download failed.

    Example:
    >>> import os, shutil, tempfile
    >>> from keras_attn.datasets import pop909
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     os.makedirs(os.path.join(folder, "pop909", "POP909", "001"))
    ...     _ = shutil.copy("examples/music/data/pop909/001.mid",
    ...                     os.path.join(folder, "pop909", "POP909", "001"))
    ...     songs = pop909.fetch([1], data_dir=folder)
    ...     print(os.path.relpath(songs, folder), os.listdir(songs))
    pop909/POP909 ['001']
    """
    names = _song_names(songs)
    base_url = base_url or BASE_URL
    missing = []  # the songs to download
    if _files.offline_dir(data_dir)[0] is None:
        cache = os.path.join(_files.cache_root(cache_dir), "pop909", "POP909")
        missing = [n for n in names if not os.path.isfile(os.path.join(cache, n, f"{n}.mid"))]
        _files.fetch_file(
            "pop909/LICENSE",
            LICENSE_SHA256,
            base_url + "LICENSE",
            cache_dir=cache_dir,
            what="POP909 license",
        )
    many = len(missing) > 1  # a line per 100 songs, not a progress bar per song
    if many:
        print(f"POP909: downloading {len(missing)} songs from {base_url} into {cache}", flush=True)
    start, done = time.time(), 0
    with _files.quiet_downloads() if many else contextlib.nullcontext():
        for name in names:
            path = _files.fetch_file(
                f"pop909/POP909/{name}/{name}.mid",
                SHA256[name],
                f"{base_url}POP909/{name}/{name}.mid",
                data_dir=data_dir,
                cache_dir=cache_dir,
                what=f"POP909 song {name}",
            )
            done += name in missing
            if many and name in missing and (done % 100 == 0 or done == len(missing)):
                print(f"  {done}/{len(missing)} songs ({time.time() - start:.0f} s)", flush=True)
    return os.path.dirname(os.path.dirname(path))
