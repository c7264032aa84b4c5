-- Traces reach the merchant: a webhook delivery keeps the W3C trace context of the request whose change it
-- reports (`traceparent`, NULL when the gateway was not tracing), so each attempt, made later and on any
-- instance, continues that trace and sends it on in the `traceparent` header.
ALTER TABLE webhook_deliveries ADD COLUMN traceparent TEXT;
