-- Every write of a provider configuration tells every payorch process, on commit, that the
-- application's configurations changed (channel `payorch_applications`, payload the application
-- id): application actors hold them between requests and forget them when they hear this.

CREATE FUNCTION payorch_provider_configs_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('payorch_applications', OLD.application_id::text);
    ELSE
        PERFORM pg_notify('payorch_applications', NEW.application_id::text);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER provider_configs_changed
    AFTER INSERT OR UPDATE OR DELETE ON provider_configs
    FOR EACH ROW EXECUTE FUNCTION payorch_provider_configs_changed();
