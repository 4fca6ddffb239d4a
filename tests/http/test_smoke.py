from tests.helpers import Client, Merchant, new_api_key, new_application


async def test_merchant_creates_application_and_lists_sessions_with_api_key(
    client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    key = await new_api_key(client, merchant, application["id"])
    response = await client.get(
        f"/api/v1/applications/{application['id']}/sessions", headers={"X-API-Key": key["key"]}
    )
    assert response.status_code == 200
    assert (await response.get_json())["items"] == []
