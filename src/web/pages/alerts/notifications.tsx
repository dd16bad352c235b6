import type { AlertNotification, AlertNotifications } from '../../../api/types.js';
import { type Column, DataTable } from '../../components/dataTable.js';
import { ProblemMessage } from '../../components/ui.js';
import { CHANNEL_NAMES, fmtDateTime } from '../../format.js';
import { usePolled, useSession } from '../../hooks.js';

const COLUMNS: Column<AlertNotification>[] = [
  { header: 'Time', class: 'nowrap', cell: (n) => fmtDateTime(n.at) },
  { header: 'Event', cell: (n) => n.kind },
  { header: 'Channel', cell: (n) => CHANNEL_NAMES[n.channel.type] ?? n.channel.type },
  { header: 'Outcome', cell: (n) => `${n.outcome}${n.attempt > 1 ? ` (attempt ${n.attempt})` : ''}` },
  { header: 'Detail', class: 'wrap', cell: (n) => n.error ?? (n.status ? `HTTP ${n.status}` : '') },
];

/** An alert's delivery log: every attempt on every channel, with its outcome. */
export function Notifications({ alertId }: { alertId: string }) {
  const { api } = useSession();
  const polled = usePolled((signal) => api.get<AlertNotifications>(`/api/v1/alerts/${encodeURIComponent(alertId)}/notifications`, signal), [alertId]);
  return (
    <div class="notifications">
      <ProblemMessage error={polled.error} />
      <DataTable
        label="Recent notifications"
        columns={COLUMNS}
        rows={polled.data?.notifications ?? []}
        rowKey={(n) => `${n.notification_id}-${n.channel.id}-${n.attempt}`}
        empty={polled.data ? 'No notifications yet.' : undefined}
      />
    </div>
  );
}
