#!/usr/bin/env python3
"""Lengths of the function bodies in C++ files (lines from the opening brace's line to
the closing brace's line), for the house rule "no function over ~120 lines"
(scripts/dev/check-house.sh, claim "functions"). A heuristic scanner, not a parser:
comments and literals are blanked, then each top-level brace block is classified from its
head (function, container, other); lambdas and nested blocks count toward the function
they are in. Generated tables (*.inc) are not read.

Usage: function_lengths.py [--min N] DIR_OR_FILE...
  prints "LINES  FILE:LINE  NAME" for each function of at least N lines (default 80),
  longest first, then a summary line."""
import os, re, sys

CONTROL = re.compile(r'^\s*(if|for|while|switch|catch|do|else|try|return)\b')
CONTAINER = re.compile(r'\b(namespace|class|struct|enum|union)\b[^()]*$|extern\s*""\s*$')

def blank(src):
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i); j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j
        elif src.startswith('/*', i):
            j = src.find('*/', i + 2); j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif c == 'R' and src.startswith('R"', i) and (i == 0 or not (src[i-1].isalnum() or src[i-1] == '_')):
            k = src.find('(', i); delim = src[i+2:k]
            j = src.find(')' + delim + '"', k); j = n if j < 0 else j + len(delim) + 2
            out.append('""' + re.sub(r'[^\n]', ' ', src[i+2:j])); i = j
        elif c in '"\'':
            if c == "'" and i > 0 and src[i-1].isalnum():  # digit separator 1'000
                out.append(c); i += 1; continue
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == '\\' else 1
            out.append(c + ' ' * (j - i - 1) + c); i = j + 1
        else:
            out.append(c); i += 1
    return ''.join(out)

def name_of(head):
    m = re.search(r'([~\w:]+(?:operator\s*\S+)?)\s*\([^()]*(?:\([^()]*\)[^()]*)*\)\s*(const|noexcept|override|final|\s)*(:.*)?$', head, re.S)
    return m.group(1) if m else head.strip().split('(')[0].split()[-1]

def functions(path):
    src = blank(open(path, encoding='utf-8', errors='replace').read())
    stack, start, res = [], 0, []   # stack of (kind, line, name)
    line = 1
    for i, c in enumerate(src):
        if c == '\n': line += 1
        in_fn = any(k == 'fn' for k, _, _ in stack)
        if c == ';' and not in_fn:
            start = i + 1
        elif c == '{':
            if in_fn:
                stack.append(('in', line, '')); continue
            head = ' '.join(src[start:i].split())
            if CONTAINER.search(head):
                kind = 'container'
            elif (head.endswith(')') or re.search(r'\)\s*(const|noexcept|override|final|mutable)(\s+\w+)*$', head)
                  or re.search(r'\)\s*:\s', head)) and not CONTROL.match(head) and '(' in head \
                  and not re.search(r'=\s*\[', head):
                kind = 'fn'
            else:
                kind = 'other'
            stack.append((kind, line, name_of(head) if kind == 'fn' else ''))
            if kind == 'container': start = i + 1
        elif c == '}':
            if not stack: continue
            kind, l0, name = stack.pop()
            if kind == 'fn':
                res.append((line - l0 + 1, path, l0, name))
            if kind in ('fn', 'container') and not any(k == 'fn' for k, _, _ in stack):
                start = i + 1
    return res

def main():
    args = sys.argv[1:]
    minimum = 80
    if args[:1] == ['--min']: minimum = int(args[1]); args = args[2:]
    files = []
    for a in args:
        if os.path.isfile(a): files.append(a)
        for root, _, names in os.walk(a):
            files += [os.path.join(root, f) for f in names if f.endswith(('.cpp', '.h', '.cc'))]
    found = [f for p in sorted(set(files)) for f in functions(p)]
    for n, p, l, name in sorted(found, reverse=True):
        if n >= minimum: print(f'{n:5d}  {p}:{l}  {name}')
    print(f'{len(found)} functions in {len(set(files))} files; longest {max(found)[0] if found else 0} lines')

main()
