#!/usr/bin/env python3
"""The files of the project that comments and documents name, and whether each is there,
for the house rule "no comment names a file that is not there"
(scripts/dev/check-house.sh, claim "paths").

Read: the comments of lib/, apps/ and tests/ and scripts/ (// and /* */ in C++ files; #
in shell, Python, awk and CMake files and in scripts with a #! line), and the whole text of
their Markdown files, docs/*.md and README.md. A name of the project is a word made of a
known top folder, more folders and a file name with a known extension:

  - the top folder one of the root's lib apps tests scripts docs configs (the name is
    relative to the root), or a folder of lib/ (relative to lib/ as the includes write
    it; a top folder the root has too, data/, is either);
  - the extension one of .h .cpp .inc .sh .py .md .json .txt .awk;
  - the word not glued to more of a path before it: a URL, an absolute path, an example
    under some other folder (a model folder's 1_Pooling/config.json, OUTPUT_DIR/...) is no
    name of the project; "./" before it is allowed. A glob or a brace list stops the word
    before its extension, so it names nothing.

A Markdown link's target that is no URL and no anchor alone is a path relative to the
document, and must be there too.

Usage: comment_paths.py ROOT
  prints "FILE:LINE: PATH" for each name whose file is not there, nothing when all are;
  exits 0 either way (2 for bad usage)."""
import os, re, sys

TOPS = ["lib", "apps", "tests", "scripts", "docs", "configs"]
EXTENSIONS = ["h", "cpp", "inc", "sh", "py", "md", "json", "txt", "awk"]
SCANNED = ["lib", "apps", "tests", "scripts"]
C_LIKE = {".h", ".hpp", ".cpp", ".cc", ".c", ".cu", ".inc"}
HASH_COMMENTS = {".sh", ".py", ".awk", ".sbatch", ".cmake"}
SKIPPED_FOLDERS = {"__pycache__"}


def name_pattern(folders):
    return re.compile(r"(?<![A-Za-z0-9_./~$@:\\-])(?:\./)?((?:%s)/[A-Za-z0-9_./-]*\.(?:%s))(?![A-Za-z0-9_-]|\.[A-Za-z0-9_])"
                      % ("|".join(sorted(set(folders))), "|".join(EXTENSIONS)))


LINK = re.compile(r"\]\(([^()\s]+)\)")


def c_comments(text):
    """(line, text) of each comment line of C++ source; literals skipped."""
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            yield line, text[i + 2:j]
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j
            for k, part in enumerate(text[i + 2:j].split("\n")):
                yield line + k, part
            line += text.count("\n", i, j)
            i = j + 2
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            k = text.find("(", i)
            end = text.find(")" + text[i + 2:k] + '"', k)
            end = n if end < 0 or k < 0 else end + (k - i - 2) + 2
            line += text.count("\n", i, end)
            i = end
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1 if j < n and text[j] == c else j
        else:
            i += 1


def hash_comments(text):
    """(line, text) after a # that starts a comment (at a line's start or after a blank)."""
    for number, line in enumerate(text.split("\n"), 1):
        m = re.search(r"(?:^|\s)#(?!!)(.*)", line)
        if m:
            yield number, m.group(1)


def named_text(path):
    """(line, text) of what in the file may name the project's files; none for other files."""
    ext = os.path.splitext(path)[1]
    base = os.path.basename(path)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return []
    if ext == ".md":
        return list(enumerate(text.split("\n"), 1))
    if ext in C_LIKE:
        return list(c_comments(text))
    if ext in HASH_COMMENTS or base == "CMakeLists.txt" or (ext == "" and text.startswith("#!")):
        return list(hash_comments(text))
    return []


def scanned_files(root):
    for top in SCANNED:
        for folder, subfolders, files in os.walk(os.path.join(root, top)):
            subfolders[:] = sorted(s for s in subfolders if not s.startswith(".") and s not in SKIPPED_FOLDERS)
            for f in sorted(files):
                yield os.path.join(folder, f)
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        for f in sorted(os.listdir(docs)):
            if f.endswith(".md"):
                yield os.path.join(docs, f)
    if os.path.isfile(os.path.join(root, "README.md")):
        yield os.path.join(root, "README.md")


def main(argv):
    if len(argv) != 2:
        print(__doc__.split("Usage: ")[1], file=sys.stderr)
        return 2
    root = argv[1]
    lib = os.path.join(root, "lib")
    lib_folders = sorted(d for d in os.listdir(lib) if os.path.isdir(os.path.join(lib, d))) if os.path.isdir(lib) else []
    names = name_pattern(TOPS + lib_folders)
    for path in scanned_files(root):
        where = os.path.relpath(path, root)
        for line, text in named_text(path):
            for m in names.finditer(text):
                name = m.group(1)
                first = name.split("/")[0]
                if os.path.exists(os.path.join(root, name)):
                    continue
                if first in lib_folders and os.path.exists(os.path.join(lib, name)):
                    continue
                print(f"{where}:{line}: {name}")
            if path.endswith(".md"):
                for m in LINK.finditer(text):
                    target = m.group(1).split("#")[0]
                    if not target or re.match(r"^[a-z]+:", target):
                        continue
                    if not os.path.exists(os.path.join(os.path.dirname(path), target)):
                        print(f"{where}:{line}: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
