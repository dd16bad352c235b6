import { type ButtonHTMLAttributes, type ComponentChildren, createContext, type JSX } from 'preact';
import { useContext, useEffect, useId, useRef, useState } from 'preact/hooks';
import { ApiError } from '../api.js';
import { useFocusReturn } from '../focus.js';
import { fmtAgo } from '../format.js';
import { type Polled, useNow } from '../hooks.js';

/** "Updated 12 s ago" with a refresh button: the spec's 60 s freshness, visible. */
export function Freshness({ polled }: { polled: Pick<Polled<unknown>, 'updatedAt' | 'loading' | 'refresh'> }) {
  const now = useNow();
  const { updatedAt, loading, refresh } = polled;
  return (
    <span class="freshness">
      <span class="muted" data-testid="freshness">
        {updatedAt === null ? (loading ? 'Loading…' : 'Not loaded') : `Updated ${fmtAgo(now - updatedAt)}`}
      </span>
      <BusyButton type="button" class="icon-button" onClick={refresh} busy={loading} aria-label="Refresh now" title="Refresh now">
        <span aria-hidden="true">↻</span>
      </BusyButton>
    </span>
  );
}

export function Panel(props: {
  title: string;
  polled?: Polled<unknown>;
  actions?: ComponentChildren;
  children: ComponentChildren;
  class?: string;
  id?: string;
}) {
  const headingId = useId();
  return (
    <section class={`panel ${props.class ?? ''}`} aria-labelledby={headingId} id={props.id}>
      <header class="panel-head">
        <h2 id={headingId}>{props.title}</h2>
        <div class="panel-actions">
          {props.actions}
          {props.polled && <Freshness polled={props.polled} />}
        </div>
      </header>
      {props.polled?.error && <ProblemMessage error={props.polled.error} />}
      {props.children}
    </section>
  );
}

/** The server's problem `detail`, or what a missing feature means. */
export function ProblemMessage({ error }: { error: ApiError | Error | string | null }) {
  if (!error) return null;
  let text: string;
  if (typeof error === 'string') text = error;
  else if (error instanceof ApiError && error.isMissingEndpoint) text = 'This server does not offer this data yet.';
  else text = error.message;
  return (
    <p class="problem" role="alert">
      {text}
    </p>
  );
}

interface FieldControl {
  id: string;
  'aria-describedby'?: string;
  'aria-invalid'?: boolean;
}

/** A labelled control with its hint and its error, wired for screen readers. */
export function Field(props: {
  label: string;
  hint?: ComponentChildren;
  error?: string | null;
  children: (control: FieldControl) => JSX.Element;
  class?: string;
}) {
  const id = useId();
  const hintId = `${id}-hint`;
  const errorId = `${id}-error`;
  const describedBy = [props.hint ? hintId : '', props.error ? errorId : ''].filter(Boolean).join(' ') || undefined;
  return (
    <div class={`field ${props.class ?? ''}`}>
      <label for={id}>{props.label}</label>
      {props.children({ id, 'aria-describedby': describedBy, 'aria-invalid': props.error ? true : undefined })}
      {props.hint && (
        <p class="hint" id={hintId}>
          {props.hint}
        </p>
      )}
      {props.error && (
        <p class="field-error" id={errorId}>
          {props.error}
        </p>
      )}
    </div>
  );
}

/** A confirmation in a modal <dialog>: Esc cancels, focus starts on Cancel, the server's refusal shows inside. */
export function ConfirmDialog(props: {
  title: string;
  children: ComponentChildren;
  confirmLabel: string;
  danger?: boolean;
  onConfirm(): Promise<void>;
  onClose(): void;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  const cancelRef = useRef<HTMLButtonElement>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<Error | null>(null);
  const titleId = useId();
  // Unmounted, not closed: the focus goes back to what opened it, or (keepFocusInPage) to the page's content when that went with the action (a revoked token's buttons).
  useFocusReturn();
  useEffect(() => {
    ref.current?.showModal();
    cancelRef.current?.focus();
  }, []);
  const confirm = async () => {
    setBusy(true);
    setError(null);
    try {
      await props.onConfirm();
      props.onClose();
    } catch (e) {
      setError(e instanceof Error ? e : new Error(String(e)));
      setBusy(false);
    }
  };
  return (
    <dialog
      ref={ref}
      class="dialog"
      aria-labelledby={titleId}
      onCancel={(e) => {
        e.preventDefault();
        if (!busy) props.onClose();
      }}
    >
      <h2 id={titleId}>{props.title}</h2>
      <div class="dialog-body">{props.children}</div>
      <ProblemMessage error={error} />
      <div class="button-row">
        <BusyButton type="button" ref={cancelRef} class="button" onClick={props.onClose} busy={busy}>
          Cancel
        </BusyButton>
        <BusyButton type="button" class={`button ${props.danger ? 'danger' : 'primary'}`} onClick={confirm} busy={busy}>
          {busy ? 'Working…' : props.confirmLabel}
        </BusyButton>
      </div>
    </dialog>
  );
}

/**
 * A button whose action is under way: it says so (aria-disabled, drawn as disabled) and ignores
 * being pressed, a form's submission included (Enter in a field presses the submit button).
 * Not `disabled`: Chromium moves the focus of a button that becomes disabled to <body>, and the
 * keyboard or screen-reader user loses their place after every action. `disabled` stays for what
 * cannot be done at all (an export the plan lacks).
 */
export function BusyButton({ busy, onClick, ...button }: Omit<ButtonHTMLAttributes<HTMLButtonElement>, 'onClick'> & { busy: boolean; onClick?(): void }) {
  return (
    <button
      {...button}
      aria-disabled={busy || undefined}
      onClick={(e) => {
        if (busy) e.preventDefault();
        else onClick?.();
      }}
    />
  );
}

/** A secret shown once, with a copy button; it is gone once dismissed. */
export function SecretOnce(props: { title: string; value: string; onDone(): void; children?: ComponentChildren }) {
  const [copied, setCopied] = useState<'no' | 'yes' | 'failed'>('no');
  const inputRef = useRef<HTMLInputElement>(null);
  const id = useId();
  useEffect(() => {
    inputRef.current?.focus();
    inputRef.current?.select();
  }, []);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(props.value);
      setCopied('yes');
    } catch {
      inputRef.current?.select();
      setCopied('failed');
    }
  };
  return (
    <section class="secret" aria-label={props.title}>
      <h3>{props.title}</h3>
      <p>
        <strong>Copy it now: it is shown only this once.</strong> We keep only a hash of it and cannot show it again.
      </p>
      {props.children}
      <label class="visually-hidden" for={id}>
        {props.title}
      </label>
      <div class="secret-row">
        <input id={id} ref={inputRef} class="mono" readOnly value={props.value} data-testid="secret-value" onFocus={(e) => e.currentTarget.select()} />
        <button type="button" class="button primary" onClick={copy}>
          Copy
        </button>
      </div>
      <p class="muted" aria-live="polite">
        {copied === 'yes' ? 'Copied to the clipboard.' : copied === 'failed' ? 'Copying failed: the text is selected, press Ctrl+C.' : ''}
      </p>
      <button type="button" class="button" onClick={props.onDone}>
        I have stored it
      </button>
    </section>
  );
}

export function StatusBadge({ status }: { status: string }) {
  return <span class={`badge status-${status}`}>{status}</span>;
}

/** A radio group drawn as a segmented control; arrows move between options, as radios do. */
export function Segmented<T extends string>(props: {
  legend: string;
  options: readonly { value: T; label: string }[];
  value: T;
  onChange(v: T): void;
  name: string;
}) {
  return (
    <fieldset class="segmented">
      <legend class="visually-hidden">{props.legend}</legend>
      {props.options.map((o) => (
        <label key={o.value} class={o.value === props.value ? 'on' : ''}>
          <input type="radio" name={props.name} value={o.value} checked={o.value === props.value} onChange={() => props.onChange(o.value)} />
          {o.label}
        </label>
      ))}
    </fieldset>
  );
}

export function Empty({ children }: { children: ComponentChildren }) {
  return <p class="empty">{children}</p>;
}

/**
 * True inside a page whose data failed to load with nothing loaded before (`loadFailed`): its
 * placeholders stop saying "Loading…" when nothing is on its way, the error and its refresh
 * button being shown above them.
 */
export const LoadFailed = createContext(false);

/** The placeholder of what has not arrived: "Loading…", or, once the load failed, that it did not load. */
export function Loading() {
  return <Empty>{useContext(LoadFailed) ? 'Not loaded: see the error above.' : 'Loading…'}</Empty>;
}

/** Tables scroll sideways on a phone instead of squeezing their columns. */
export function TableWrap({ label, children }: { label: string; children: ComponentChildren }) {
  return (
    // biome-ignore lint/a11y/noNoninteractiveTabindex: a scrollable region must be reachable by keyboard.
    <section class="table-wrap" aria-label={label} tabIndex={0}>
      {children}
    </section>
  );
}
