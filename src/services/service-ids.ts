// The ids of the built-in metered services (the catalogue holds their actions and prices).
export const SERVICE_IDS = ['mail', 'github-public'] as const;
export type ServiceId = (typeof SERVICE_IDS)[number];
