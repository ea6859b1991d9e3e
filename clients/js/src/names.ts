/**
 * Names go into the text as given, so this check is the only place an injection could pass
 * (clients.md §2, R3). An identifier starts with a letter (Unicode Alphabetic) or `_` and goes
 * on with letters, marks that belong to them, numbers and `_`; a field may be a path of
 * identifiers joined by single dots.
 */
import { refuse } from './errors.js';

const IDENT = /^[\p{Alphabetic}_][\p{Alphabetic}\p{M}\p{N}_]*$/u;

export function isIdentifier(name: unknown): name is string {
  return typeof name === 'string' && IDENT.test(name);
}

export function isFieldPath(name: unknown): name is string {
  return typeof name === 'string' && name.split('.').every((part) => IDENT.test(part));
}

/** JSON quoting, as the refusal messages quote a name (a non-text name is shown as JSON too). */
function quoted(name: unknown): string {
  return name === undefined ? 'undefined' : JSON.stringify(name);
}

export function checkCollection(name: unknown): string {
  if (!isIdentifier(name)) refuse(`invalid collection name: ${quoted(name)}`);
  return name;
}

export function checkField(name: unknown): string {
  if (!isFieldPath(name)) refuse(`invalid field name: ${quoted(name)}`);
  return name;
}
