import { ApiFailure } from './api';

/**
 * Elements built from values, never from markup: every text goes in as a text node, so a name
 * stored with HTML in it is shown as the characters it is. There is no innerHTML in the console.
 */

type Child = Node | string | number | null | undefined | false;
type Attributes = Record<string, string | number | boolean | null | undefined | ((event: Event) => void)>;

export function h<Tag extends keyof HTMLElementTagNameMap>(
  tag: Tag,
  attributes: Attributes = {},
  ...children: Child[]
): HTMLElementTagNameMap[Tag] {
  const element = document.createElement(tag);
  setAttributes(element, attributes);
  append(element, children);
  return element;
}

const SVG = 'http://www.w3.org/2000/svg';

export function svg(tag: string, attributes: Attributes = {}, ...children: Child[]): SVGElement {
  const element = document.createElementNS(SVG, tag);
  setAttributes(element, attributes);
  append(element, children);
  return element;
}

function setAttributes(element: Element, attributes: Attributes): void {
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (typeof value === 'function') element.addEventListener(name.replace(/^on/, ''), value);
    else element.setAttribute(name, value === true ? '' : String(value));
  }
}

function append(element: Element, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    element.append(typeof child === 'object' ? child : document.createTextNode(String(child)));
  }
}

/** Replaces what `parent` holds. */
export function replace(parent: Element, ...children: Child[]): void {
  parent.replaceChildren();
  append(parent, children);
}

let ids = 0;
/** An id for a label's `for` and an input's `id`. */
export const uniqueId = (prefix: string) => `${prefix}-${++ids}`;

/** A labelled field: the label names the control, for screen readers and for tests. */
export function field(
  label: string,
  control: HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement,
  hint?: string,
) {
  control.id ||= uniqueId('field');
  const hintId = hint ? `${control.id}-hint` : undefined;
  if (hintId) control.setAttribute('aria-describedby', hintId);
  return h(
    'div',
    { class: 'field' },
    h('label', { for: control.id }, label),
    control,
    hint ? h('small', { id: hintId, class: 'hint' }, hint) : null,
  );
}

export function select(
  name: string,
  options: { value: string; label: string }[],
  selected?: string,
): HTMLSelectElement {
  const element = h('select', { name });
  for (const option of options) {
    element.append(h('option', { value: option.value, selected: option.value === selected }, option.label));
  }
  return element;
}

/**
 * A table of text: its caption, its column headings, and its rows, each the cells of a row whose
 * first heads it, or a row `row` built (with attributes of its own); "None." when there are none.
 * It scrolls sideways where it is too wide, and so takes the focus, for a keyboard to scroll it.
 */
export function table(caption: string, headings: string[], rows: (Child[] | HTMLTableRowElement)[]): HTMLTableElement {
  return h(
    'table',
    { class: 'list', tabindex: 0 },
    h('caption', {}, caption),
    h('thead', {}, h('tr', {}, ...headings.map((title) => h('th', { scope: 'col' }, title)))),
    h(
      'tbody',
      {},
      ...rows.map((cells) => (Array.isArray(cells) ? row({}, cells[0], ...cells.slice(1)) : cells)),
      rows.length === 0 ? h('tr', {}, h('td', { colspan: headings.length }, 'None.')) : null,
    ),
  );
}

/** A status line read out when it changes (role=status), or an alert for a failure. */
export function notice(text: string, kind: 'status' | 'alert' = 'status'): HTMLElement {
  return h('p', { role: kind, class: `notice ${kind}` }, text);
}

/** A date from Unix seconds, in the reader's locale. */
export const when = (seconds: number) => new Date(seconds * 1000).toLocaleString();

/** Runs `work`, showing a refusal in `status`. */
export async function failureTo(status: HTMLElement, work: () => Promise<void>): Promise<void> {
  try {
    await work();
  } catch (error) {
    replace(status, notice(error instanceof ApiFailure ? error.message : 'The gateway could not be reached.', 'alert'));
  }
}

/** Answers `form`'s submission with `work`, a refusal shown in `status`. */
export function onSubmit(form: HTMLFormElement, status: HTMLElement, work: () => Promise<void>): void {
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    void failureTo(status, work);
  });
}

/** A size in bytes, in the largest unit it reaches. */
export function size(bytes: number): string {
  const units = ['bytes', 'KiB', 'MiB', 'GiB'];
  let unit = 0;
  while (bytes >= 1024 && unit < units.length - 1) {
    bytes /= 1024;
    unit++;
  }
  return `${unit === 0 ? bytes : bytes.toFixed(1)} ${units[unit]}`;
}

/** A row whose first cell (`th`) names it. */
export const row = (attributes: Record<string, string>, name: Child, ...cells: Child[]) =>
  h('tr', attributes, h('th', { scope: 'row' }, name), ...cells.map((cell) => h('td', {}, cell)));

/** A button for what cannot be undone: it asks `question` first, a refusal shown in `status`. */
export function dangerButton(
  label: string,
  name: string,
  question: string,
  status: HTMLElement,
  work: () => Promise<void>,
): HTMLButtonElement {
  const ask = async () => {
    if (confirm(question)) await work();
  };
  return h(
    'button',
    { type: 'button', class: 'danger', 'aria-label': name, onclick: () => void failureTo(status, ask) },
    label,
  );
}

/** A section of cards, or a line saying there is none. */
export const cards = (label: string, items: HTMLElement[], none: string) =>
  h('section', { 'aria-label': label }, ...(items.length > 0 ? items : [h('p', {}, none)]));
