"""Packaging (issue 47): the light install, the extras and one version.

`pip install keras_attn` installs keras, NumPy and ml-dtypes only; what
needs TensorFlow, symusic or Pillow comes with an extra and says so when it
is missing (`keras_attn.extras`). CI proves the light install in a venv
without TensorFlow (`.ci/light_install_check.py`, run by `.ci/run`); these
tests pin what the repository decides: the requirements in setup.cfg, which
packages the core modules import, the error that names an extra, and that
the package, setup.cfg and CHANGELOG.md carry the same version.
"""

import ast
import configparser
import os
import re
import subprocess
import sys
import textwrap

import pytest

import keras_attn
from keras_attn import extras

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PACKAGE = os.path.join(ROOT, "keras_attn")
CORE_REQUIREMENTS = {"keras", "numpy", "ml-dtypes"}
# Import name -> distribution name, for the packages the core and the extras bring.
DISTRIBUTIONS = {
    "keras": "keras",
    "numpy": "numpy",
    "ml_dtypes": "ml-dtypes",
    "tensorflow": "tensorflow",
    "tensorflow_text": "tensorflow-text",
    "sentencepiece": "sentencepiece",
    "symusic": "symusic",
    "PIL": "pillow",
}
# Packages whose every module must import with the core requirements only.
OPTIONAL_PACKAGES = ("export", "preprocessing")


def _setup_cfg():
    config = configparser.ConfigParser(interpolation=None)
    config.read(os.path.join(ROOT, "setup.cfg"), encoding="utf-8")
    return config


def _requirements(value):
    """{distribution name (lowercase) or 'keras_attn[extra,...]': line}."""
    found = {}
    for line in value.strip().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name = re.match(r"[A-Za-z0-9_.-]+(\[[^\]]*\])?", line).group(0)
        if not name.startswith("keras_attn"):
            name = re.sub(r"\[.*", "", name).lower().replace("_", "-")
        found[name] = line
    return found


def _extras():
    config = _setup_cfg()
    return {
        extra: _requirements(value) for extra, value in config["options.extras_require"].items()
    }


def _expanded(extra, table):
    """Distribution names an extra installs, following keras_attn[...] references."""
    names = set()
    for name in table[extra]:
        match = re.fullmatch(r"keras_attn\[(.*)\]", name)
        if match:
            for inner in match.group(1).split(","):
                names |= _expanded(inner.strip(), table)
        else:
            names.add(name)
    return names


def test_version_is_the_same_in_package_metadata_and_changelog():
    version = keras_attn.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), version
    assert _setup_cfg()["metadata"]["version"] == "attr: keras_attn.__version__"
    with open(os.path.join(ROOT, "CHANGELOG.md"), encoding="utf-8") as changelog:
        headings = re.findall(r"^## \[([^\]]+)\]", changelog.read(), re.MULTILINE)
    assert headings[0] == "Unreleased", headings
    assert version in headings, (version, headings)


def test_license_file_is_the_apache_license_setup_cfg_names():
    metadata = _setup_cfg()["metadata"]
    assert metadata["license_expression"] == "Apache-2.0"
    assert metadata["license_files"].split() == ["LICENSE"]
    with open(os.path.join(ROOT, "LICENSE"), encoding="utf-8") as license_file:
        text = license_file.read()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_core_requirements_are_keras_numpy_and_ml_dtypes():
    requirements = _requirements(_setup_cfg()["options"]["install_requires"])
    assert set(requirements) == CORE_REQUIREMENTS, requirements
    # A range, not a pin: the next Keras 3 release installs the day it ships.
    assert re.search(r"<\s*4\b", requirements["keras"]), requirements["keras"]


def test_each_extra_installs_the_modules_it_is_named_for():
    table = _extras()
    for extra, modules in extras.EXTRA_MODULES.items():
        assert extra in table, f"setup.cfg has no extra {extra!r}"
        missing = {DISTRIBUTIONS[m] for m in modules} - _expanded(extra, table)
        assert not missing, f"extra {extra!r} lacks {missing}"
    # The test command (README.md) runs every suite: `[tests]` must install all of it.
    for needed in ("tensorflow", "tensorflow-text", "symusic", "pillow", "jax", "pytest"):
        assert needed in _expanded("tests", table), needed
    assert {"mkdocs-material", "mkdocstrings"} <= _expanded("docs", table)


def _imports_run_on_import(tree):
    """Import nodes that run when the module is imported (not inside functions)."""
    pending = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        pending.extend(ast.iter_child_nodes(node))


def test_core_modules_import_only_the_core_requirements():
    allowed = {name for name, dist in DISTRIBUTIONS.items() if dist in CORE_REQUIREMENTS}
    optional = tuple(os.path.join(PACKAGE, name) + os.sep for name in OPTIONAL_PACKAGES)
    wrong = []
    for folder, _, files in os.walk(PACKAGE):
        for file in sorted(files):
            path = os.path.join(folder, file)
            if not file.endswith(".py") or path.startswith(optional):
                continue
            with open(path, encoding="utf-8") as source:
                tree = ast.parse(source.read(), path)
            for node in _imports_run_on_import(tree):
                if isinstance(node, ast.ImportFrom) and node.level:
                    continue
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                else:
                    names = [node.module]
                for name in names:
                    root = name.split(".")[0]
                    if root in sys.stdlib_module_names or root == "keras_attn" or root in allowed:
                        continue
                    wrong.append(f"{os.path.relpath(path, ROOT)}:{node.lineno} imports {name}")
    assert not wrong, "not a core requirement (setup.cfg install_requires):\n" + "\n".join(wrong)


def test_needs_extra_names_the_install_line_and_passes_other_errors_through():
    with pytest.raises(ModuleNotFoundError) as info:
        with extras.needs_extra("music", "MIDI reading"):
            raise ModuleNotFoundError("No module named 'symusic'", name="symusic")
    assert str(info.value) == 'MIDI reading needs symusic: pip install "keras_attn[music]"'
    assert info.value.name == "symusic"
    other = ModuleNotFoundError("No module named 'six'", name="six")
    with pytest.raises(ModuleNotFoundError) as info:
        with extras.needs_extra("tensorflow", "export"):
            raise other
    assert info.value is other
    with pytest.raises(ValueError, match="`extra` must be one of"):
        with extras.needs_extra("tensorflw", "export"):
            pass


_CHILD = textwrap.dedent(
    """
    import sys


    class NotInstalled:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0].startswith("tensorflow"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None


    sys.meta_path.insert(0, NotInstalled())
    import keras_attn.layers  # the light install works

    try:
        import keras_attn.export
    except ModuleNotFoundError as error:
        print(error)
    else:
        print("imported")
    """
)


def test_export_without_tensorflow_says_which_extra_installs_it():
    pytest.importorskip("jax")
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=ROOT)
    result = subprocess.run(
        [sys.executable, "-c", _CHILD],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == (
        'keras_attn.export needs tensorflow: pip install "keras_attn[tensorflow]"'
    ), result.stdout + result.stderr
