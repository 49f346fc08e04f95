// Finds where a dashboard module builds markup outside the `html` template
// (agent/daemon/web/html.mjs): a string or an untagged `template` holding a
// tag, a value joined to one with `+`, a raw() call, an innerHTML outside
// core.mjs. A small JavaScript lexer (strings, templates nested in ${...},
// comments, regular expressions), enough for the dashboard's own code.
//
//   node tests/web/unit/markup_scan.mjs FILE...   prints the counts of each file
import {readFileSync} from 'node:fs';

const MARKUP = /<[a-zA-Z\/!]/;
const REGEX_AFTER = new Set(['(', ',', '=', ':', '[', '!', '&', '|', '?', '{', '}', ';', '+', '-', '*', '%',
  '<', '>', '~', '^', 'return', 'typeof', 'case', 'do', 'else', 'in', 'of', '=>', '']);

// The literals of `src`: {kind: 'string' | 'template', tag, text, interpolations, line},
// and its tokens, in order ({t: 'lit', lit} or {t: 'punct' | 'word', v}).
export function lex(src) {
  const literals = [];
  let i = 0, line = 1;
  const tokens = [];
  const prev = () => tokens.length ? tokens[tokens.length - 1] : null;
  const prevValue = () => { const p = prev(); return p ? (p.t === 'lit' ? 'lit' : p.v) : ''; };

  function template(tag) {
    // unquoted: ${...} right after `name=` inside a tag, where a space in
    // the value would start a new attribute (escaping covers quoted ones).
    const lit = {kind: 'template', tag, text: '', interpolations: 0, unquoted: 0, line};
    literals.push(lit);
    i++;  // the backtick
    while (i < src.length && src[i] !== '`') {
      if (src[i] === '\\') { lit.text += src.slice(i, i + 2); i += 2; continue; }
      if (src[i] === '$' && src[i + 1] === '{') {
        lit.interpolations++;
        const lt = lit.text.lastIndexOf('<'), tag = lt < 0 ? '>' : lit.text.slice(lt);
        const quotes = q => tag.split(q).length - 1;
        if (lit.text.endsWith('=') && !tag.includes('>') && quotes('"') % 2 === 0 && quotes("'") % 2 === 0) lit.unquoted++;
        i += 2;
        const saved = tokens.length;
        expression('}');
        tokens.length = saved;  // the inside is its own expression
        i++;  // the }
        continue;
      }
      if (src[i] === '\n') line++;
      lit.text += src[i++];
    }
    i++;
    return lit;
  }

  // Lexes until `close` at depth 0 (or the end); leaves i on it.
  function expression(close) {
    let depth = 0;
    while (i < src.length) {
      const c = src[i];
      if (c === '\n') { line++; i++; continue; }
      if (/\s/.test(c)) { i++; continue; }
      if (c === '/' && src[i + 1] === '/') { while (i < src.length && src[i] !== '\n') i++; continue; }
      if (c === '/' && src[i + 1] === '*') {
        const end = src.indexOf('*/', i + 2);
        line += (src.slice(i, end).match(/\n/g) || []).length;
        i = end + 2;
        continue;
      }
      if (c === '"' || c === "'") {
        const lit = {kind: 'string', tag: '', text: '', interpolations: 0, line};
        i++;
        while (i < src.length && src[i] !== c) {
          if (src[i] === '\\') { lit.text += src.slice(i, i + 2); i += 2; continue; }
          lit.text += src[i++];
        }
        i++;
        literals.push(lit);
        tokens.push({t: 'lit', lit});
        continue;
      }
      if (c === '`') {
        const p = prev();
        const tag = p && p.t === 'word' ? p.v : '';
        tokens.push({t: 'lit', lit: template(tag)});
        continue;
      }
      if (c === '/' && REGEX_AFTER.has(prevValue())) {
        i++;
        let cls = false;
        while (i < src.length && (cls || src[i] !== '/')) {
          if (src[i] === '\\') { i += 2; continue; }
          if (src[i] === '[') cls = true;
          if (src[i] === ']') cls = false;
          i++;
        }
        i++;
        while (/[a-z]/.test(src[i] || '')) i++;
        tokens.push({t: 'word', v: 'regex'});
        continue;
      }
      if (/[A-Za-z_$0-9]/.test(c)) {
        let w = '';
        while (i < src.length && /[A-Za-z_$0-9.]/.test(src[i])) w += src[i++];
        tokens.push({t: 'word', v: w});
        continue;
      }
      if (c === '=' && src[i + 1] === '>') { tokens.push({t: 'punct', v: '=>'}); i += 2; continue; }
      if (c === '{' || c === '(' || c === '[') depth++;
      if (c === '}' || c === ')' || c === ']') {
        if (depth === 0 && c === close) return;
        depth--;
      }
      tokens.push({t: 'punct', v: c});
      i++;
    }
  }
  expression('');
  return {literals, tokens};
}

// The counts for one module's source.
export function scan(src) {
  const {literals, tokens} = lex(src);
  const markup = l => MARKUP.test(l.text);
  const untagged = literals.filter(l => l.tag !== 'html' && markup(l));
  const isLit = t => t && t.t === 'lit';
  let joins = 0;  // a value joined to markup with +
  tokens.forEach((t, k) => {
    if (t.t !== 'punct' || t.v !== '+') return;
    const a = tokens[k - 1], b = tokens[k + 1];
    if ((isLit(a) && markup(a.lit) && !isLit(b)) || (isLit(b) && markup(b.lit) && !isLit(a))) joins++;
  });
  const html = literals.filter(l => l.tag === 'html');
  return {
    // Markup built outside `html`: each is a place where a value may go unescaped.
    untaggedMarkup: untagged.length,
    untaggedInterpolations: untagged.reduce((n, l) => n + l.interpolations, 0),
    joins,
    escCalls: (src.match(/\besc\(/g) || []).length,
    rawCalls: (src.match(/\braw\(/g) || []).length - (src.match(/export function raw\(/g) || []).length,
    innerHTML: (src.match(/\.innerHTML\s*=/g) || []).length,
    // Through the template: escaped unless markup.
    htmlTemplates: html.length,
    htmlInterpolations: html.reduce((n, l) => n + l.interpolations, 0),
    unquotedAttributes: html.reduce((n, l) => n + l.unquoted, 0),
    where: untagged.map(l => l.line),
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const f of process.argv.slice(2)) {
    const c = scan(readFileSync(f, 'utf8'));
    delete c.where;
    console.log(f, JSON.stringify(c));
  }
}
