import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/**
 * The documentation links only to what the repository holds: every relative link names a file or
 * folder that exists, and every `#anchor` a heading of the linked markdown file. And the decisions'
 * index lists the decisions as they stand, so it cannot drift from them.
 */
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const DOCS = [
  'README.md',
  'bench/README.md',
  'bench/HISTORY.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

const read = (file: string): string => readFileSync(join(ROOT, file), 'utf8');

/**
 * The text with its code blanked (fenced blocks and code spans, which may run over lines within a
 * paragraph), so that nothing in code counts as a link; same length, same lines.
 */
function prose(markdown: string): string {
  let fenced = false;
  const lines = markdown.split('\n').map((line) => {
    const fence = /^\s*(```|~~~)/.test(line);
    if (fence) fenced = !fenced;
    return fence || fenced ? ' '.repeat(line.length) : line;
  });
  return lines.join('\n').replace(/`(?:[^`\n]|\n(?!\s*\n))*`/g, (code) => code.replace(/[^\n]/g, ' '));
}

/** Link targets with their line: inline links and images (an image inside a link too, link text over several lines too), reference definitions, HTML href and src. */
function linkTargets(markdown: string): Array<{ line: number; target: string }> {
  const found: Array<{ target: string; at: number }> = [];
  const inline = /!?\[[^[\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)/;
  let text = prose(markdown);
  for (let match = inline.exec(text); match; match = inline.exec(text)) {
    found.push({ target: match[1] ?? '', at: match.index });
    // Innermost first (its text holds no bracket); blanked, so a link around an image is found next.
    text = text.slice(0, match.index) + match[0].replace(/[^\n]/g, 'x') + text.slice(match.index + match[0].length);
  }
  for (const definition of text.matchAll(/^ {0,3}\[[^\]\n]+\]:[ \t]*<?([^\s>]+)>?/gm)) found.push({ target: definition[1] ?? '', at: definition.index });
  for (const html of text.matchAll(/\s(?:href|src)="([^"]*)"/g)) found.push({ target: html[1] ?? '', at: html.index });
  return found.sort((a, b) => a.at - b.at).map(({ target, at }) => ({ target, line: markdown.slice(0, at).split('\n').length }));
}

/** GitHub's anchor for a heading: its text lower-cased, punctuation dropped, spaces as hyphens; repeats get -1, -2, … */
function headingSlugs(markdown: string): Set<string> {
  const slugs = new Set<string>();
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced;
    const heading = fenced ? null : /^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!heading) continue;
    const text = (heading[1] ?? '').replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1').replace(/[`*]/g, '');
    const base = text
      .toLowerCase()
      .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
      .replace(/ /g, '-');
    let slug = base;
    for (let n = 1; slugs.has(slug); n++) slug = `${base}-${n}`;
    slugs.add(slug);
  }
  return slugs;
}

/** What is wrong with a link from `file` to `target`, or null when it points at something the repository holds. */
function deadLink(file: string, target: string): string | null {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('//')) return null; // a web address, mailto:
  if (target.startsWith('/')) return 'an absolute path (links are relative to the document)';
  const hash = target.indexOf('#');
  const pathPart = decodeURIComponent(hash < 0 ? target : target.slice(0, hash));
  const anchor = hash < 0 ? null : decodeURIComponent(target.slice(hash + 1));
  const path = pathPart === '' ? join(ROOT, file) : resolve(ROOT, dirname(file), pathPart);
  const inRepo = relative(ROOT, path);
  if (inRepo === '..' || inRepo.startsWith(`..${sep}`)) return 'outside the repository';
  if (!existsSync(path)) return 'no such file';
  if (anchor !== null && anchor !== '') {
    if (statSync(path).isDirectory() || !path.endsWith('.md')) return 'an anchor into something that is not a markdown file';
    if (!headingSlugs(readFileSync(path, 'utf8')).has(anchor.toLowerCase())) return `no heading "#${anchor}"`;
  }
  return null;
}

describe('links in the documentation', () => {
  it.each(DOCS)('%s links only to files and headings the repository holds', (file) => {
    const dead = linkTargets(read(file)).flatMap(({ line, target }) => {
      const problem = deadLink(file, target);
      return problem ? [`${file}:${line} (${target}): ${problem}`] : [];
    });
    expect(dead).toEqual([]);
  });

  it('finds the links it checks (inline, images inside links, definitions, anchors), and not those in code', () => {
    const sample = [
      'See [the map](docs/architecture.md) and [![badge](img.png)](x.md#part "title"), [a link',
      'over two lines](two.md).',
      '[ref]: ../outside.md',
      '`[in code](nowhere.md)` and `code over',
      'lines [in code](nowhere.md)`',
      '```',
      '[in a fence](nowhere.md)',
      '```',
      '<a href="a.md">a</a>',
    ].join('\n');
    expect(linkTargets(sample).map((l) => l.target)).toEqual(['docs/architecture.md', 'x.md#part', 'img.png', 'two.md', '../outside.md', 'a.md']);
    expect(deadLink('README.md', 'docs/nowhere.md')).toBe('no such file');
    expect(deadLink('README.md', '../shared/DESIGN.md')).toBe('outside the repository');
    expect(deadLink('docs/architecture.md', 'decisions.md#no-such-heading')).toBe('no heading "#no-such-heading"');
    expect(deadLink('docs/architecture.md', 'decisions.md#tokens-and-accounts')).toBeNull();
  });

  it('derives anchors as GitHub does', () => {
    expect([...headingSlugs('# Gateway (chain-facing)\n## Limits, usage queue, change feed\n## `/metrics` it\n## Index\n### Index')]).toEqual([
      'gateway-chain-facing',
      'limits-usage-queue-change-feed',
      'metrics-it',
      'index',
      'index-1',
    ]);
  });
});

interface Entry {
  title: string;
  superseded: 'no' | 'whole' | 'in part';
}

/** A decision's top-level bullet, its lines joined; a line that does not start with a space ends it. */
function bullets(lines: string[]): string[] {
  const found: string[] = [];
  for (const line of lines) {
    if (line.startsWith('- ')) found.push(line);
    else if (line.startsWith(' ') && found.length > 0 && line.trim() !== '') found[found.length - 1] += ` ${line.trim()}`;
  }
  return found;
}

function entry(bullet: string): Entry {
  const superseded = bullet.startsWith('- **Superseded in part**') ? 'in part' : bullet.startsWith('- **Superseded**') ? 'whole' : 'no';
  // The title is the first bold text after the mark (whose own text has no bold).
  const unmarked = superseded === 'no' ? bullet : `- ${bullet.replace(/^- \*\*Superseded( in part)?\*\*[^*]*/, '')}`;
  return { title: /^- \*\*(.+?)\*\*/.exec(unmarked)?.[1] ?? `(no title: ${bullet.slice(0, 60)})`, superseded };
}

/** Titles compared without code marks, a final period, or what follows a "…" in the index's shortened form. */
const plain = (text: string): string => text.split('…')[0]!.replace(/`/g, '').replace(/\s+/g, ' ').trim().replace(/\.$/, '');
/** An index line names an entry when one starts with the other (the index may shorten a title, or add a few words to a terse one). */
const names = (line: string, title: string): boolean => plain(line).startsWith(plain(title)) || plain(title).startsWith(plain(line));

describe('the index of docs/decisions.md', () => {
  const text = read('docs/decisions.md');
  const parts = text.split(/^## /m).slice(1);
  const indexPart = parts.find((part) => part.startsWith('Index\n')) ?? '';
  const sections = parts
    .filter((part) => part !== indexPart)
    .map((part) => {
      const [heading = '', ...lines] = part.split('\n');
      return { heading, entries: bullets(lines).map(entry) };
    });
  const [inForce = '', wholly = '', inPart = ''] = indexPart.split(/^### Superseded(?: in part)?$/m);

  it('lists the decisions in force of each section, in their order, under a link to the section', () => {
    const listed = inForce
      .split(/^- /m)
      .slice(1)
      .map((block) => {
        const [head = '', ...lines] = block.split('\n');
        return { head, items: lines.filter((line) => line.startsWith('  - ')).map((line) => line.slice(4)) };
      });
    expect(listed.map((l) => l.head)).toEqual(sections.map((s) => `[${s.heading}](#${[...headingSlugs(`## ${s.heading}`)][0]})`));
    for (const [i, section] of sections.entries()) {
      const titles = section.entries.filter((e) => e.superseded !== 'whole').map((e) => e.title);
      const items = listed[i]?.items ?? [];
      expect(items.length, `${section.heading}: ${items.length} lines in the index for ${titles.length} decisions in force`).toBe(titles.length);
      const misnamed = items.flatMap((item, j) => (names(item, titles[j] ?? '') ? [] : [`index line "${item}" for "${titles[j]}"`]));
      expect(misnamed, section.heading).toEqual([]);
    }
  });

  it('lists the superseded decisions, and those superseded in part, at its end', () => {
    const titles = (kind: Entry['superseded']) => sections.flatMap((s) => s.entries.filter((e) => e.superseded === kind).map((e) => e.title));
    const items = (part: string) => bullets(part.split('\n')).map((b) => b.slice(2).split(' ([')[0] ?? '');
    for (const [part, kind] of [
      [wholly, 'whole'],
      [inPart, 'in part'],
    ] as const) {
      const expected = titles(kind);
      const listed = items(part);
      expect(listed.length, `${listed.length} listed as superseded ${kind} for ${expected.length} marked`).toBe(expected.length);
      const misnamed = listed.flatMap((item, j) => (names(item, expected[j] ?? '') ? [] : [`"${item}" for "${expected[j]}"`]));
      expect(misnamed, `superseded ${kind}`).toEqual([]);
    }
  });
});
