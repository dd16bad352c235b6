import type { AlertNotifications } from '../../../api/types.js';
import { Empty, ProblemMessage, TableWrap } from '../../components/ui.js';
import { CHANNEL_NAMES, fmtDateTime } from '../../format.js';
import { usePolled, useSession } from '../../hooks.js';

/** An alert's delivery log: every attempt on every channel, with its outcome. */
export function Notifications({ alertId }: { alertId: string }) {
  const { api } = useSession();
  const polled = usePolled((signal) => api.get<AlertNotifications>(`/api/v1/alerts/${encodeURIComponent(alertId)}/notifications`, signal), [alertId]);
  const rows = polled.data?.notifications ?? [];
  return (
    <div class="notifications">
      <ProblemMessage error={polled.error} />
      {polled.data && rows.length === 0 ? (
        <Empty>No notifications yet.</Empty>
      ) : (
        <TableWrap label="Recent notifications">
          <table>
            <thead>
              <tr>
                <th scope="col">Time</th>
                <th scope="col">Event</th>
                <th scope="col">Channel</th>
                <th scope="col">Outcome</th>
                <th scope="col">Detail</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((n) => (
                <tr key={`${n.notification_id}-${n.channel.id}-${n.attempt}`}>
                  <td class="nowrap">{fmtDateTime(n.at)}</td>
                  <td>{n.kind}</td>
                  <td>{CHANNEL_NAMES[n.channel.type] ?? n.channel.type}</td>
                  <td>
                    {n.outcome}
                    {n.attempt > 1 ? ` (attempt ${n.attempt})` : ''}
                  </td>
                  <td class="wrap">{n.error ?? (n.status ? `HTTP ${n.status}` : '')}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableWrap>
      )}
    </div>
  );
}
