import { useState } from 'preact/hooks';
import type { TokenRecord } from '../../api/types.js';
import { useSession } from '../hooks.js';
import { BusyButton, ConfirmDialog } from './ui.js';

const asError = (e: unknown): Error => (e instanceof Error ? e : new Error(String(e)));

/** Enable/disable switch and revoke (behind a confirmation) for one token. */
export function TokenActions(props: { token: TokenRecord; onChanged(t: TokenRecord): void; onError(e: Error | null): void }) {
  const { api, refreshAccount } = useSession();
  const [busy, setBusy] = useState(false);
  const [confirming, setConfirming] = useState(false);
  const t = props.token;
  if (t.status === 'revoked' || t.status === 'expired') return <span class="muted">—</span>;
  const enabled = t.status === 'active';
  const path = `/api/v1/tokens/${encodeURIComponent(t.id)}`;

  const toggle = async () => {
    setBusy(true);
    props.onError(null);
    try {
      props.onChanged(await api.patch<TokenRecord>(path, { status: enabled ? 'disabled' : 'active' }));
    } catch (e) {
      props.onError(asError(e));
    } finally {
      setBusy(false);
    }
  };

  const revoke = async () => {
    const revoked = await api.delete<TokenRecord>(path);
    props.onChanged(revoked);
    await refreshAccount().catch(() => undefined);
  };

  return (
    <div class="row-actions">
      <BusyButton
        type="button"
        role="switch"
        class={`switch ${enabled ? 'on' : ''}`}
        aria-checked={enabled}
        aria-label={`${t.name}: enabled`}
        busy={busy}
        onClick={toggle}
      >
        <span class="switch-track" aria-hidden="true">
          <span class="switch-thumb" />
        </span>
        <span class="switch-label">{enabled ? 'Enabled' : 'Disabled'}</span>
      </BusyButton>
      <button type="button" class="button small danger-outline" onClick={() => setConfirming(true)} aria-label={`Revoke ${t.name}`}>
        Revoke
      </button>
      {confirming && (
        <ConfirmDialog title={`Revoke “${t.name}”?`} confirmLabel="Revoke token" danger onConfirm={revoke} onClose={() => setConfirming(false)}>
          <p>
            Calls with <code>{t.masked}</code> will be refused with 401 from now on. <strong>This cannot be undone</strong>: to use the gateway again you will
            need a new token.
          </p>
          {t.status === 'disabled' && <p class="muted">If you only want to pause it, it is already disabled.</p>}
        </ConfirmDialog>
      )}
    </div>
  );
}
