// Spending over time: the last 30 days per agent (GET /v1/owner/spending), drawn as plain SVG (one line per
// agent, a legend, round ticks), with the same figures in a table for whoever would rather read them.
import { useLayoutEffect, useRef, useState } from 'preact/hooks';
import { ok } from '../api.ts';
import { fractionOf, valueAxis } from '../chart.ts';
import { credits } from '../money.ts';
import { PageHead, useConsole, useLoad } from '../ui.tsx';

type Spending = Awaited<ReturnType<typeof loadSpending>>;

/** Distinguishable on white and to most colour vision (Okabe–Ito), each at least 3:1 against the background. */
const COLOURS = ['#0072B2', '#D55E00', '#009E73', '#CC79A7', '#8C6D00', '#56307A', '#B8004A', '#4D4D4D'];
/** The drawing's width before it is measured, and the narrowest it is drawn at (narrower screens scroll the page). */
const WIDTH = 720;
const WIDTH_MIN = 280;
const HEIGHT = 260;
const PAD = { right: 16, top: 12, bottom: 32 };

async function loadSpending(api: ReturnType<typeof useConsole>['api']) {
  return ok(await api.GET('/v1/owner/spending', { params: { query: { days: 30 } } }));
}

/**
 * The width the chart is shown at, in CSS pixels: the drawing is made at that width (its viewBox), so its 12-unit
 * labels are 12 px on any screen. At a fixed 720 and scaled down, they were about 6 px on a phone (found from outside).
 */
function useShownWidth() {
  const ref = useRef<HTMLDivElement>(null);
  const [width, setWidth] = useState(WIDTH);
  useLayoutEffect(() => {
    const element = ref.current;
    if (!element) return;
    const measure = () => setWidth(Math.max(WIDTH_MIN, Math.round(element.clientWidth)));
    measure();
    const observer = new ResizeObserver(measure);
    observer.observe(element);
    return () => observer.disconnect();
  }, []);
  return [ref, width] as const;
}

function Chart({ spending }: { spending: Spending }) {
  const [shown, width] = useShownWidth();
  const days = spending.days;
  const series = spending.agents.slice(0, COLOURS.length);
  const axis = valueAxis(series.flatMap((agent) => agent.spentUc.map((uc) => BigInt(uc))).reduce((a, b) => (a > b ? a : b), 0n));
  // The plot starts where the longest label ends: a fixed padding clipped labels above 10,000 credits.
  const left = axis.labelWidthPx;
  const x = (index: number) => left + (index * (width - left - PAD.right)) / Math.max(1, days.length - 1);
  const y = (uc: bigint) => HEIGHT - PAD.bottom - fractionOf(uc, axis.topUc) * (HEIGHT - PAD.top - PAD.bottom);
  const summary = series.map((agent) => `${agent.name}: ${credits(agent.totalUc)} credits`).join('; ');
  return (
    <figure class="chart">
      <div ref={shown}>
        <svg viewBox={`0 0 ${width} ${HEIGHT}`} role="img" aria-label={`Spending per day from ${days[0]} to ${days.at(-1)}. ${summary || 'No spending.'}`}>
          {axis.ticksUc.map((tick, n) => (
            <g>
              <line x1={left} x2={width - PAD.right} y1={y(tick)} y2={y(tick)} stroke="#d0d7de" stroke-width="1" />
              <text x={left - 8} y={y(tick) + 4} text-anchor="end" font-size="12" fill="#59636e">
                {axis.labels[n]}
              </text>
            </g>
          ))}
          {([[0, 'start'], [Math.floor((days.length - 1) / 2), 'middle'], [days.length - 1, 'end']] as const).map(([index, anchor]) => (
            <text x={x(index)} y={HEIGHT - 10} text-anchor={anchor} font-size="12" fill="#59636e">
              {days[index]}
            </text>
          ))}
          {series.map((agent, n) => (
            <polyline
              fill="none"
              stroke={COLOURS[n]}
              stroke-width="2.5"
              stroke-linejoin="round"
              points={agent.spentUc.map((uc, index) => `${x(index).toFixed(1)},${y(BigInt(uc)).toFixed(1)}`).join(' ')}
            />
          ))}
        </svg>
      </div>
      <figcaption>
        <ul class="legend">
          {series.map((agent, n) => (
            <li>
              <svg width="14" height="14" aria-hidden="true">
                <rect width="14" height="14" rx="3" fill={COLOURS[n]} />
              </svg>{' '}
              {agent.name}: {credits(agent.totalUc)} credits
            </li>
          ))}
        </ul>
        {spending.agents.length > COLOURS.length ? <p class="muted">The chart shows the {COLOURS.length} agents that spent most; the table below has them all.</p> : null}
      </figcaption>
    </figure>
  );
}

export function SpendingPage() {
  const { api } = useConsole();
  const spending = useLoad(() => loadSpending(api), []);
  return (
    <>
      <PageHead title="Spending" heading="Spending over the last 30 days" loads={[spending]} onRefresh={spending.reload} />
      <p class="muted">Per agent and per UTC day of the purchase: what is held, plus what was captured less what was refunded (as budgets count it).</p>
      {spending.data ? (
        spending.data.agents.length === 0 ? (
          <p>No spending in the last 30 days.</p>
        ) : (
          <>
            <Chart spending={spending.data} />
            <details>
              <summary>The figures, day by day</summary>
              <div class="table-scroll">
                <table>
                  {/* Its unit said once, in the caption and each agent's heading (found from outside: bare "2.50"). */}
                  <caption>Credits spent per agent and UTC day</caption>
                  <thead>
                    <tr>
                      <th scope="col">Day (UTC)</th>
                      {spending.data.agents.map((agent) => (
                        <th scope="col">{agent.name} (credits)</th>
                      ))}
                    </tr>
                  </thead>
                  <tbody>
                    {spending.data.days.map((day, index) => (
                      <tr>
                        <th scope="row">{day}</th>
                        {spending.data!.agents.map((agent) => (
                          <td>{credits(agent.spentUc[index] ?? '0')}</td>
                        ))}
                      </tr>
                    ))}
                  </tbody>
                </table>
              </div>
            </details>
          </>
        )
      ) : null}
    </>
  );
}
